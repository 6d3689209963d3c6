package templates_test

import (
	"strconv"
	"testing"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// BenchmarkRender measures one full render (subject, text, HTML) of the
// three-line sample order and of a 50-line order:
//
//	go test -run '^$' -bench Render -benchmem ./internal/templates
func BenchmarkRender(b *testing.B) {
	r, err := templates.New(templates.Options{})
	if err != nil {
		b.Fatal(err)
	}
	big := sampleOrder()
	big.Items, big.Total = nil, ""
	for i := range 50 {
		big.Items = append(big.Items, templates.Item{SKU: "SKU-" + strconv.Itoa(i), Name: "Áo thun cổ tròn <size M>", Quantity: i + 1, UnitPrice: "125000"})
	}
	for name, o := range map[string]templates.Order{"items=3": sampleOrder(), "items=50": big} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Render(templates.OrderConfirmed, "vi", o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
