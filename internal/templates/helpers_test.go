package templates_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// allTemplates are the embedded templates; TestNames holds the registry to
// this list, so a new template cannot miss the tests that range over it.
var allTemplates = []string{templates.OrderCancelled, templates.OrderConfirmed}

// locales are the locales every embedded template has.
var locales = []string{"vi", "en"}

// newRegistry returns a registry with the embedded templates and defaults.
func newRegistry(t *testing.T) *templates.Registry {
	t.Helper()
	r, err := templates.New(templates.Options{})
	require.NoError(t, err)
	return r
}

// sampleOrder is an order as an OrderConfirmed carries it (docs/contract.md, "Input"), with three lines.
func sampleOrder() templates.Order {
	return templates.Order{
		OrderID:      "42",
		Email:        "b@example.com",
		CustomerName: "Nguyễn Văn B",
		Locale:       "vi",
		Currency:     "VND",
		Total:        "1905000",
		Items: []templates.Item{
			{SKU: "SKU-1", Name: "Áo thun", Quantity: 2, UnitPrice: "625000"},
			{SKU: "SKU-7", Name: "Quần jean xanh", Quantity: 1, UnitPrice: "590000"},
			{SKU: "", Name: "Tất cổ ngắn", Quantity: 1000, UnitPrice: "65"},
		},
		OccurredAt: time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC),
	}
}

// requireReason asserts err is a permanent *mailtype.Error with reason.
func requireReason(t *testing.T, err error, reason mailtype.Reason) {
	t.Helper()
	require.Error(t, err)
	var me *mailtype.Error
	require.True(t, errors.As(err, &me), "want *mailtype.Error, got %T: %v", err, err)
	require.Equal(t, mailtype.Permanent, me.Class, "class of %v", err)
	require.Equal(t, reason, me.Reason, "reason of %v", err)
}
