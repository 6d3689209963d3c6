package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueState is what the broker says about one queue.
type QueueState struct {
	// Ready is the number of messages ready for delivery, unacknowledged
	// deliveries not included.
	Ready int
	// Unacked is the number of deliveries awaiting an acknowledgement, or
	// -1 when the source cannot tell (a passive queue.declare).
	Unacked int
	// Consumers is the number of consumers of the queue.
	Consumers int
}

// InspectQueue reads the state of queue with a passive queue.declare on a
// channel of its own, closed afterwards (a missing queue closes it: the
// broker's 404, returned as ErrNoQueue). AMQP tells the ready messages and
// the consumers, not the unacknowledged deliveries: Unacked is -1.
func (c *Conn) InspectQueue(queue string) (QueueState, error) {
	ch, err := c.c.Channel()
	if err != nil {
		return QueueState{}, fmt.Errorf("open inspect channel: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return QueueState{}, fmt.Errorf("%w: %s", ErrNoQueue, queue)
		}
		return QueueState{}, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return QueueState{Ready: q.Messages, Unacked: -1, Consumers: q.Consumers}, nil
}

// Management reads queue states from RabbitMQ's management plugin (HTTP
// API, GET /api/queues/{vhost}/{name}), the one place that counts the
// unacknowledged deliveries. Its numbers are the plugin's samples, by
// default at most 5 s old (collect_statistics_interval).
type Management struct {
	// BaseURL is the API's root, e.g. http://user:password@rabbitmq:15672/;
	// its user and password are sent with basic authentication.
	BaseURL string
	// Vhost is the virtual host of the queues ("/" by default).
	Vhost string
	// Client makes the requests; nil means http.DefaultClient (give it a
	// timeout through the context instead).
	Client *http.Client
}

// InspectQueue reads the state of queue. A missing queue is ErrNoQueue;
// any other failure names the URL without its password.
func (m *Management) InspectQueue(ctx context.Context, queue string) (QueueState, error) {
	u, err := url.Parse(m.BaseURL)
	if err != nil {
		return QueueState{}, errors.New("management URL is not a URL")
	}
	user := u.User
	u.User = nil
	vhost := m.Vhost
	if vhost == "" {
		vhost = "/"
	}
	// The vhost "/" travels as %2F: every segment is escaped on its own.
	base := strings.TrimRight(u.Path, "/")
	u.Path = base + "/api/queues/" + vhost + "/" + queue
	u.RawPath = base + "/api/queues/" + url.PathEscape(vhost) + "/" + url.PathEscape(queue)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return QueueState{}, fmt.Errorf("management request: %w", err)
	}
	if user != nil {
		pw, _ := user.Password()
		req.SetBasicAuth(user.Username(), pw)
	}
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		return QueueState{}, fmt.Errorf("management API %s: %w", u.Redacted(), unwrapURLError(err))
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotFound:
		return QueueState{}, fmt.Errorf("%w: %s", ErrNoQueue, queue)
	case res.StatusCode != http.StatusOK:
		return QueueState{}, fmt.Errorf("management API %s: %s", u.Redacted(), res.Status)
	}
	var body struct {
		Ready     *int `json:"messages_ready"`
		Unacked   *int `json:"messages_unacknowledged"`
		Consumers int  `json:"consumers"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return QueueState{}, fmt.Errorf("management API %s: %w", u.Redacted(), err)
	}
	if body.Ready == nil || body.Unacked == nil {
		// A queue just declared has no message statistics until the next sample.
		return QueueState{}, fmt.Errorf("management API %s: no message counts yet", u.Redacted())
	}
	return QueueState{Ready: *body.Ready, Unacked: *body.Unacked, Consumers: body.Consumers}, nil
}

// unwrapURLError drops net/url's copy of the request URL from err: the
// URL printed is the redacted one.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
