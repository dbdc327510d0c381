package bridge

import (
	"github.com/nats-io/nats.go"
	"github.com/parsley-go/parsley/stage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// natsCarrier writes and reads trace context in NATS headers, whose keys
// are case-sensitive: traceparent stays traceparent.
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c natsCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c natsCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// injectTrace carries the delivery's trace context, when its stage traces
// (stage.Config.TracerProvider), into the message's headers: it replaces
// the upstream producer's traceparent forwarded from Kafka, so a NATS
// consumer's spans are children of the bridge's process span, which links
// to that producer.
func injectTrace(prop propagation.TextMapPropagator, m *stage.Message[[]byte, []byte], h nats.Header) {
	ctx := m.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	prop.Inject(ctx, natsCarrier(h)) // SinkConfig.withDefaults: W3C trace context unless set
}
