package broker

import amqp "github.com/rabbitmq/amqp091-go"

// Headers travel as map[string]any in broker's API. amqp091-go decodes a
// nested field table (an x-death entry, for one) as amqp.Table and encodes
// only amqp.Table, never a plain map, so values are converted both ways,
// at every depth: fromTable on receipt, toTable on publish.

// fromTable returns t as a map, nested tables included; it converts t in
// place (t was just decoded and belongs to the caller).
func fromTable(t amqp.Table) map[string]any {
	if t == nil {
		return nil
	}
	for k, v := range t {
		if n, changed := fromValue(v); changed {
			t[k] = n
		}
	}
	return map[string]any(t)
}

func fromValue(v any) (any, bool) {
	switch x := v.(type) {
	case amqp.Table:
		return fromTable(x), true
	case []any:
		for i, e := range x {
			if n, changed := fromValue(e); changed {
				x[i] = n
			}
		}
	}
	return v, false
}

// toTable returns a copy of h as an amqp.Table, nested maps included,
// with room for extra more entries.
func toTable(h map[string]any, extra int) amqp.Table {
	out := make(amqp.Table, len(h)+extra)
	for k, v := range h {
		out[k] = toValue(v)
	}
	return out
}

func toValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return toTable(x, 0)
	case amqp.Table:
		return toTable(x, 0)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toValue(e)
		}
		return out
	}
	return v
}
