package consumer

import "errors"

// RetriesForTest is the number of failed attempts to record a batch.
func (c *Consumer) RetriesForTest() int64 { return c.retries.Load() }

// SessionsForTest is the number of sessions that started consuming.
func (c *Consumer) SessionsForTest() int64 { return c.sessions.Load() }

// RedeliveredForTest is the number of deliveries that arrived flagged
// redelivered.
func (c *Consumer) RedeliveredForTest() int64 { return c.redelivered.Load() }

// ReleasesForTest is the number of times the deliveries held were given
// back because the database refused writes.
func (c *Consumer) ReleasesForTest() int64 { return c.releases.Load() }

// CloseChannelForTest closes the consuming channel under the running
// session, as the broker does on a consumer acknowledgement timeout.
func (c *Consumer) CloseChannelForTest() error {
	c.mu.Lock()
	ch := c.ch
	c.mu.Unlock()
	if ch == nil {
		return errors.New("not consuming")
	}
	return ch.Close()
}
