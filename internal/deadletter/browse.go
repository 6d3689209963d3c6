package deadletter

import (
	"errors"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// Visit is called by Sweep for each message in queue order; remove
// acknowledges the message, which leaves the queue for good. An error
// stops the sweep.
type Visit func(e Entry, remove func() error) error

// MaxSweep is the most messages one Sweep reads.
const MaxSweep = 100_000

// returnWait bounds how long Sweep waits for the broker to put back the
// messages it held: closing a channel returns them asynchronously, and a
// browse that started before they are back would find the queue empty.
const returnWait = 5 * time.Second

// Sweep reads the messages of queue one by one with basic.get, in queue
// order, until it is empty (at most MaxSweep), and holds each
// unacknowledged while it calls visit; then it closes its channel, and
// the broker returns every message not removed to the queue, in the order
// they were read, ahead of any that arrived meanwhile. It waits (at most
// returnWait) until they are back. Each read counts as a delivery of the
// message (x-delivery-count; the dead-letter queue's QueueDeliveryLimit is
// out of reach), and a consumer of the queue sees none of the held
// messages until the sweep ends. It returns the number of messages read,
// an error wrapping broker.ErrNoQueue for a missing queue, a *BrokerError
// for any other broker failure, or visit's error.
func Sweep(conn *broker.Conn, queue string, visit Visit) (int, error) {
	get, err := broker.NewGetter(conn)
	if err != nil {
		return 0, &BrokerError{Err: err}
	}
	depth, err := get.Depth(queue)
	if err != nil {
		_ = get.Close()
		if errors.Is(err, broker.ErrNoQueue) {
			return 0, err
		}
		return 0, &BrokerError{Err: err}
	}
	read, kept, err := sweep(get, queue, visit)
	_ = get.Close()
	// Every message there at the start but the removed ones: those held
	// come back, those a visit that stopped early never read stayed.
	waitReturned(conn, queue, kept, depth-(read-kept))
	return read, err
}

func sweep(get *broker.Getter, queue string, visit Visit) (read, kept int, err error) {
	for read < MaxSweep {
		got, ok, err := get.Get(queue)
		if err != nil {
			return read, kept, &BrokerError{Err: err}
		}
		if !ok {
			return read, kept, nil
		}
		read++
		removed := false
		remove := func() error {
			if err := got.Ack(); err != nil {
				return &BrokerError{Err: err}
			}
			removed = true
			return nil
		}
		err = visit(NewEntry(read, got.Message), remove)
		if !removed {
			kept++
		}
		if err != nil {
			return read, kept, err
		}
	}
	return read, kept, nil
}

// waitReturned waits, when kept messages were held, until queue holds at
// least want ready messages, or returnWait passed, or the broker fails
// (the next command will say so).
func waitReturned(conn *broker.Conn, queue string, kept, want int) {
	if kept == 0 {
		return
	}
	deadline := time.Now().Add(returnWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		st, err := conn.InspectQueue(queue)
		if err != nil || st.Ready >= want {
			return
		}
		<-tick.C
	}
}

// Browse returns the messages of queue, in queue order, and leaves them
// all in it (Sweep removing nothing).
func Browse(conn *broker.Conn, queue string) ([]Entry, error) {
	var out []Entry
	_, err := Sweep(conn, queue, func(e Entry, _ func() error) error {
		out = append(out, e)
		return nil
	})
	return out, err
}
