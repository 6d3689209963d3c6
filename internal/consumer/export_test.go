package consumer

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// RetriesForTest is the number of failed attempts to record a batch.
func (c *Consumer) RetriesForTest() int64 { return int64(testutil.ToFloat64(c.metrics.IngestRetries)) }

// ConnectionsForTest is the number of connections that started consuming.
func (c *Consumer) ConnectionsForTest() int64 {
	return int64(testutil.ToFloat64(c.metrics.Connections))
}

// RedeliveredForTest is the number of deliveries that arrived flagged
// redelivered.
func (c *Consumer) RedeliveredForTest() int64 {
	return int64(testutil.ToFloat64(c.metrics.Redelivered))
}

// ReleasesForTest is the number of times the deliveries held were given
// back because the database refused writes.
func (c *Consumer) ReleasesForTest() int64 { return int64(testutil.ToFloat64(c.metrics.Releases)) }

// CloseChannelForTest closes the consuming channel under the running
// connection, as the broker does on a consumer acknowledgement timeout.
func (c *Consumer) CloseChannelForTest() error {
	c.mu.Lock()
	ch := c.ch
	c.mu.Unlock()
	if ch == nil {
		return errors.New("not consuming")
	}
	return ch.Close()
}

// FindDuplicateKeyForTest runs Decide's key scan on b.
func FindDuplicateKeyForTest(b []byte) (*DuplicateKeyError, error) { return findDuplicateKey(b) }

// FoldKeyForTest is the folded form the key scan compares keys by.
func FoldKeyForTest(key string) string { return foldKey(key) }

// MaxScanDepthForTest is the deepest nesting the key scan follows.
const MaxScanDepthForTest = maxScanDepth

// DecodeForTest decodes b as Decide does (the envelope, then its data),
// without the key scan and without checking a field.
func DecodeForTest(b []byte) error {
	var env envelope
	if err := decodeJSON(b, &env, "body"); err != nil {
		return err
	}
	if _, _, err := parseOrderID(env.Data); err != nil {
		return err
	}
	return nil
}
