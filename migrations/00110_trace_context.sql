-- +goose Up
-- trace_context: the W3C trace context (traceparent, and tracestate when
-- there is one) of the span that wrote the row, as a JSON object of the
-- two headers, e.g. {"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}.
-- NULL while tracing is off (tracing.enabled) and for rows written before
-- this migration. The consumer writes it on mail (the span of the input
-- delivery, whose trace the order's traceparent started); the sender's
-- send span continues it, and the outbox row of a feedback event carries
-- the context of the span that wrote it, so that the relay publishes the
-- event with a traceparent of the same trace. No index: it is only read
-- with the row.
ALTER TABLE mail ADD COLUMN trace_context text;
ALTER TABLE outbox ADD COLUMN trace_context text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN trace_context;
ALTER TABLE mail DROP COLUMN trace_context;
