package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Document is the part of asyncapi.yaml that code checks: for each message
// name, the channel address (exchange) and routing key it is published
// with and the schema file of its payload.
type Document struct {
	// Messages maps a message name (the event type) to its route.
	Messages map[string]Route
}

// Route is where and how one message type travels.
type Route struct {
	// Action is "send" (mailsvc publishes it) or "receive" (mailsvc
	// consumes it), as the document's operation says.
	Action string
	// Exchange is the channel address.
	Exchange string
	// RoutingKey is the operation's AMQP cc binding.
	RoutingKey string
	// Persistent is the operation's deliveryMode 2.
	Persistent bool
	// MessageType is the message's AMQP messageType binding.
	MessageType string
	// ContentType is the message's contentType.
	ContentType string
	// Schema is the payload's schema file ("email-sent.json").
	Schema string
}

// asyncDoc mirrors the fields of asyncapi.yaml that Document reads.
type asyncDoc struct {
	Channels map[string]struct {
		Address string `yaml:"address"`
	} `yaml:"channels"`
	Operations map[string]struct {
		Action   string `yaml:"action"`
		Channel  ref    `yaml:"channel"`
		Messages []ref  `yaml:"messages"`
		Bindings struct {
			AMQP struct {
				CC           []string `yaml:"cc"`
				DeliveryMode int      `yaml:"deliveryMode"`
			} `yaml:"amqp"`
		} `yaml:"bindings"`
	} `yaml:"operations"`
	Components struct {
		Messages map[string]struct {
			Name        string `yaml:"name"`
			ContentType string `yaml:"contentType"`
			Payload     struct {
				Schema ref `yaml:"schema"`
			} `yaml:"payload"`
			Bindings struct {
				AMQP struct {
					MessageType string `yaml:"messageType"`
				} `yaml:"amqp"`
			} `yaml:"bindings"`
		} `yaml:"messages"`
	} `yaml:"components"`
}

type ref struct {
	Ref string `yaml:"$ref"`
}

var document = sync.OnceValues(parseDocument)

// ReadDocument parses the embedded asyncapi.yaml. Every operation names one
// channel, one message and one routing key.
func ReadDocument() (*Document, error) { return document() }

func parseDocument() (*Document, error) {
	b, err := Files.ReadFile("asyncapi.yaml")
	if err != nil {
		return nil, err
	}
	var d asyncDoc
	if err := yaml.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("asyncapi.yaml: %w", err)
	}
	out := &Document{Messages: map[string]Route{}}
	for name, op := range d.Operations {
		ch, ok := d.Channels[strings.TrimPrefix(op.Channel.Ref, "#/channels/")]
		if !ok || len(op.Messages) != 1 || len(op.Bindings.AMQP.CC) != 1 {
			return nil, fmt.Errorf("asyncapi.yaml: operation %s must name a channel, one message and one routing key (cc)", name)
		}
		msgName := op.Messages[0].Ref[strings.LastIndexByte(op.Messages[0].Ref, '/')+1:]
		m, ok := d.Components.Messages[msgName]
		if !ok {
			return nil, fmt.Errorf("asyncapi.yaml: operation %s: no component message %s", name, msgName)
		}
		out.Messages[m.Name] = Route{
			Action: op.Action, Exchange: ch.Address, RoutingKey: op.Bindings.AMQP.CC[0],
			Persistent: op.Bindings.AMQP.DeliveryMode == 2, MessageType: m.Bindings.AMQP.MessageType,
			ContentType: m.ContentType, Schema: strings.TrimPrefix(m.Payload.Schema.Ref, "./schemas/"),
		}
	}
	return out, nil
}

// Message is a feedback message as a consumer of mail.events receives it.
type Message struct {
	RoutingKey  string
	MessageID   string
	Type        string
	ContentType string
	// Persistent is AMQP delivery mode 2.
	Persistent bool
	Body       []byte
}

// ValidateFeedbackMessage checks a message received from mail.events
// against the contract: the body against its type's schema
// (ValidateFeedback), and the properties asyncapi.yaml fixes: routing key,
// type, content type, persistence, message_id equal to the body's
// event_id. It returns every reason, nil when there is none.
func ValidateFeedbackMessage(m Message) []string {
	doc, err := document()
	if err != nil {
		panic(fmt.Sprintf("api: embedded asyncapi.yaml: %v", err))
	}
	out := ValidateFeedback(m.Type, m.Body)
	r, ok := doc.Messages[m.Type]
	if !ok || r.Action != "send" {
		return out
	}
	if m.RoutingKey != r.RoutingKey {
		out = append(out, fmt.Sprintf("routing key: %q, want %q for %s", m.RoutingKey, r.RoutingKey, m.Type))
	}
	if m.Type != r.MessageType {
		out = append(out, fmt.Sprintf("type: %q, want %q", m.Type, r.MessageType))
	}
	if m.ContentType != r.ContentType {
		out = append(out, fmt.Sprintf("content_type: %q, want %q", m.ContentType, r.ContentType))
	}
	if m.Persistent != r.Persistent {
		out = append(out, fmt.Sprintf("delivery_mode: persistent %t, want %t", m.Persistent, r.Persistent))
	}
	var env struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(m.Body, &env) == nil && m.MessageID != env.EventID {
		out = append(out, fmt.Sprintf("message_id: %q differs from event_id %q", m.MessageID, env.EventID))
	}
	return out
}
