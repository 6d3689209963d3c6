package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeData writes a --data file and returns its path.
func writeData(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data.json")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	event := writeData(t, `{"event_type":"OrderConfirmed","occurred_at":"2026-09-18T08:00:00Z","data":{
		"order_id": 42, "email": "b@example.com", "customer_name": "Nguyễn Văn B", "locale": "vi",
		"currency": "VND", "total": "1250000",
		"items": [{"sku": "SKU-1", "name": "Áo thun", "quantity": 2, "unit_price": "625000"}]}}`)
	var out, errOut bytes.Buffer
	err := Execute(context.Background(), []string{"template", "render", "--data", event, "--text"}, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "\nThời gian đặt: 18/09/2026 15:00 (GMT+7)\n")
	require.Contains(t, out.String(), "\nTổng cộng: 1.250.000 ₫\n")

	dataOnly := writeData(t, `{"order_id": "A-7", "email": "b@example.com", "currency": "USD",
		"items": [{"name": "Pen", "quantity": 3, "unit_price": "0.10"}]}`)
	out.Reset()
	err = Execute(context.Background(), []string{"template", "render", "--data", dataOnly, "--locale", "en", "--time-zone", "UTC"}, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "Subject: Your order #A-7 is confirmed\nLocale: en\n")
	require.Contains(t, out.String(), "\nTotal: $0.30\n")
	require.Contains(t, out.String(), "--- text/html ---\n<!DOCTYPE html>")
}

// TestTemplateRenderCancelled renders the cancellation notice from the same
// OrderConfirmed data as the confirmation, in both locales; the default
// template stays order_confirmed.
func TestTemplateRenderCancelled(t *testing.T) {
	t.Parallel()
	event := writeData(t, `{"event_type":"OrderConfirmed","occurred_at":"2026-09-18T08:00:00Z","data":{
		"order_id": 42, "email": "b@example.com", "customer_name": "Nguyễn Văn B", "locale": "vi",
		"currency": "VND", "total": "1250000",
		"items": [{"sku": "SKU-1", "name": "Áo thun", "quantity": 2, "unit_price": "625000"}]}}`)
	var out, errOut bytes.Buffer
	err := Execute(context.Background(), []string{"template", "render", "--template", "order_cancelled", "--data", event}, &out, &errOut)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out.String(), "Subject: Đơn hàng #42 đã bị hủy\nLocale: vi\n\n--- text/plain ---\nXin chào Nguyễn Văn B,\n"), out.String())
	require.Contains(t, out.String(), "\nThời gian đặt: 18/09/2026 15:00 (GMT+7)\n")
	require.Contains(t, out.String(), "\n  2 × 625.000 ₫ = 1.250.000 ₫\n")
	require.Contains(t, out.String(), "\nTổng cộng: 1.250.000 ₫\n")
	require.Contains(t, out.String(), "--- text/html ---\n<!DOCTYPE html>")

	out.Reset()
	err = Execute(context.Background(), []string{"template", "render", "--template", "order_cancelled", "--data", event, "--locale", "en", "--html"}, &out, &errOut)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out.String(), "<!DOCTYPE html>\n"))
	require.Contains(t, out.String(), "<title>Your order #42 has been cancelled</title>")
	require.Contains(t, out.String(), ">₫1,250,000</td>")

	out.Reset()
	err = Execute(context.Background(), []string{"template", "render", "--data", event, "--text"}, &out, &errOut)
	require.NoError(t, err)
	require.Contains(t, out.String(), "Đơn hàng #42 của bạn đã được xác nhận.", "the default template is order_confirmed")
}

func TestTemplateRenderRefused(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"bad address": `{"order_id": 1, "email": "not an address", "currency": "VND", "items": [{"name": "x", "quantity": 1, "unit_price": "1"}]}`,
		"bad json":    `{"order_id": `,
		"bad id":      `{"order_id": {"x": 1}}`,
	} {
		var out, errOut bytes.Buffer
		err := Execute(context.Background(), []string{"template", "render", "--data", writeData(t, body)}, &out, &errOut)
		require.Error(t, err, name)
		require.Equal(t, 2, ExitCode(err), name)
		require.Empty(t, out.String(), name)
	}
	var out, errOut bytes.Buffer
	err := Execute(context.Background(), []string{"template", "render", "--template", "order_shipped", "--data", writeData(t, "{}")}, &out, &errOut)
	require.Equal(t, 2, ExitCode(err))
	require.EqualError(t, err, `unknown template "order_shipped": want one of order_cancelled, order_confirmed`)
	require.Empty(t, out.String())
}
