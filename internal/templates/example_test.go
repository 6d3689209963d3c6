package templates_test

import (
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// The consumer renders a confirmation once and stores the three parts; the
// sender reads the per-template settings.
func ExampleRegistry_Render() {
	reg, err := templates.New(templates.Options{DefaultLocale: "vi", TimeZone: "Asia/Ho_Chi_Minh"})
	if err != nil {
		panic(err)
	}
	out, err := reg.Render(templates.OrderConfirmed, "en", templates.Order{
		OrderID: "42", Email: "b@example.com", CustomerName: "Nguyễn Văn B",
		Currency: "VND", Total: "1250000",
		Items:      []templates.Item{{SKU: "SKU-1", Name: "Áo thun", Quantity: 2, UnitPrice: "625000"}},
		OccurredAt: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	})
	if err != nil {
		panic(err)
	}
	settings, _ := reg.Settings(templates.OrderConfirmed)
	fmt.Println(out.Subject)
	fmt.Println(out.ToName, "<"+out.ToAddress+">")
	fmt.Println(settings.MaxEventAge)
	// Output:
	// Your order #42 is confirmed
	// Nguyễn Văn B <b@example.com>
	// 0s
}

// The cancellation notice renders from the same Order as the confirmation:
// the data of the order as it was confirmed.
func ExampleRegistry_Render_orderCancelled() {
	reg, err := templates.New(templates.Options{})
	if err != nil {
		panic(err)
	}
	order := templates.Order{
		OrderID: "42", Email: "b@example.com", CustomerName: "Nguyễn Văn B", Locale: "vi",
		Currency: "VND", Total: "1250000",
		Items:      []templates.Item{{SKU: "SKU-1", Name: "Áo thun", Quantity: 2, UnitPrice: "625000"}},
		OccurredAt: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
	for _, locale := range []string{"", "en"} {
		out, err := reg.Render(templates.OrderCancelled, locale, order)
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Locale, out.Subject)
	}
	settings, _ := reg.Settings(templates.OrderCancelled)
	fmt.Println(settings.MaxEventAge)
	// Output:
	// vi Đơn hàng #42 đã bị hủy
	// en Your order #42 has been cancelled
	// 0s
}
