package broker

// HeaderCarrier reads and writes text values of AMQP message headers, so
// that a trace context (W3C traceparent and tracestate) travels in them:
// it has the methods of OpenTelemetry's propagation.TextMapCarrier. A
// header value that is not text (a number, a table) reads as "". Set on
// a nil map does nothing: make the map before (Message.Headers).
type HeaderCarrier map[string]any

// Get returns the text of header key ("" when absent or not text: a
// longstr arrives as a string, a byte array as []byte).
func (c HeaderCarrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// Set sets header key to the text value.
func (c HeaderCarrier) Set(key, value string) {
	if c != nil {
		c[key] = value
	}
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
