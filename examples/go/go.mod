module github.com/mailsvc/mailsvc/examples/go

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/rabbitmq/amqp091-go v1.16.0
)
