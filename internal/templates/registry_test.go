package templates_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

func TestUnknownTemplate(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	_, err := r.Render("order_shipped", "vi", sampleOrder())
	requireReason(t, err, mailtype.ReasonUnknownTemplate)
	require.Contains(t, err.Error(), `"order_shipped"`)
	_, err = r.Settings("order_shipped")
	requireReason(t, err, mailtype.ReasonUnknownTemplate)
	require.Nil(t, r.Locales("order_shipped"))
}

// TestNames checks that both embedded templates load and that every one
// has every locale, each rendering the sample order with a subject of its
// own.
func TestNames(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	require.Equal(t, allTemplates, r.Names())
	subjects := map[string]string{}
	for _, name := range r.Names() {
		require.Equal(t, []string{"en", "vi"}, r.Locales(name), name)
		for _, locale := range locales {
			out, err := r.Render(name, locale, sampleOrder())
			require.NoError(t, err, "%s/%s", name, locale)
			require.Equal(t, locale, out.Locale)
			require.NotContains(t, subjects, out.Subject, "%s/%s: subject shared with another template", name, locale)
			subjects[out.Subject] = name
		}
	}
	require.Len(t, subjects, len(allTemplates)*len(locales))
}

func TestLocaleResolution(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	cases := map[string]string{"vi": "vi", "en": "en", "EN": "en", "en-US": "en", "en_GB": "en", "vi-VN": "vi",
		"fr": "vi", "": "vi", "zz-\r\n": "vi", "english": "vi"}
	for _, name := range allTemplates {
		for in, want := range cases {
			o := sampleOrder()
			o.Locale = "en" // used only when the argument is empty
			out, err := r.Render(name, in, o)
			require.NoError(t, err)
			if in == "" {
				want = "en"
			}
			require.Equal(t, want, out.Locale, "%s: locale %q", name, in)
		}
	}
	en, err := templates.New(templates.Options{DefaultLocale: "en"})
	require.NoError(t, err)
	for name, subject := range map[string]string{
		templates.OrderConfirmed: "Your order #42 is confirmed",
		templates.OrderCancelled: "Your order #42 has been cancelled",
	} {
		out, err := en.Render(name, "fr", sampleOrder())
		require.NoError(t, err)
		require.Equal(t, "en", out.Locale)
		require.Equal(t, subject, out.Subject)
	}
}

// TestSettings checks the embedded settings: both templates use the global
// ambiguous policy and max event age; confirmations go in the bulk lane,
// notices in the priority lane.
func TestSettings(t *testing.T) {
	t.Parallel()
	r := newRegistry(t)
	s, err := r.Settings(templates.OrderConfirmed)
	require.NoError(t, err)
	require.Equal(t, templates.Settings{AmbiguousPolicy: "", Lane: mailtype.LaneBulk}, s, "mail.max_event_age applies")
	s, err = r.Settings(templates.OrderCancelled)
	require.NoError(t, err)
	require.Equal(t, templates.Settings{AmbiguousPolicy: "", Lane: mailtype.LanePriority}, s, "mail.max_event_age applies")
}

// A settings.yaml names a template's lane; without the key, or without the
// file, the template's default lane applies (priority for the notice).
func TestSettingsLane(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"order_confirmed/settings.yaml": "lane: priority\n",
		"order_cancelled/settings.yaml": "max_event_age: 2h\n",
		"password_reset/vi/subject.txt": "Đặt lại mật khẩu {{.OrderID}}",
		"password_reset/vi/body.txt":    "{{.OrderID}}",
		"password_reset/vi/body.html":   "<p>{{.OrderID}}</p>",
	})
	r, err := templates.New(templates.Options{Dir: dir})
	require.NoError(t, err)
	for name, want := range map[string]mailtype.Lane{templates.OrderConfirmed: mailtype.LanePriority,
		templates.OrderCancelled: mailtype.LanePriority, "password_reset": mailtype.LaneBulk} {
		s, err := r.Settings(name)
		require.NoError(t, err)
		require.Equal(t, want, s.Lane, name)
	}
}

// TestDeterministic renders the same order many times, from several
// goroutines and from two registries: every result is byte-identical.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	r1, r2 := newRegistry(t), newRegistry(t)
	for _, name := range allTemplates {
		for _, locale := range locales {
			want, err := r1.Render(name, locale, sampleOrder())
			require.NoError(t, err)
			results := make([]templates.Rendered, 16)
			var wg sync.WaitGroup
			for i := range results {
				wg.Go(func() {
					r := r1
					if i%2 == 1 {
						r = r2
					}
					results[i], _ = r.Render(name, locale, sampleOrder())
				})
			}
			wg.Wait()
			for i, got := range results {
				require.Equal(t, want, got, "%s/%s: render %d", name, locale, i)
			}
		}
	}
}

func TestTimeZone(t *testing.T) {
	t.Parallel()
	for zone, want := range map[string]string{
		"":                 "18/09/2026 15:00 (GMT+7)",
		"UTC":              "18/09/2026 08:00 (GMT)",
		"Asia/Kolkata":     "18/09/2026 13:30 (GMT+5:30)",
		"America/New_York": "18/09/2026 04:00 (GMT-4)",
	} {
		r, err := templates.New(templates.Options{TimeZone: zone})
		require.NoError(t, err)
		for _, name := range allTemplates {
			out, err := r.Render(name, "vi", sampleOrder())
			require.NoError(t, err)
			require.Contains(t, out.Text, "\nThời gian đặt: "+want+"\n", name)
		}
	}
	r := newRegistry(t)
	o := sampleOrder()
	o.OccurredAt = time.Time{}
	for _, name := range allTemplates {
		out, err := r.Render(name, "en", o)
		require.NoError(t, err)
		require.NotContains(t, out.Text, "Order date", name)
		require.NotContains(t, out.HTML, "Order date", name)
	}
	_, err := templates.New(templates.Options{TimeZone: "Mars/Olympus"})
	require.Error(t, err)
}

// writeFiles creates files (path -> content) under a new temporary dir.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

// TestOverrideDir replaces one file and the settings of order_confirmed,
// one file of order_cancelled, and adds a template: the rest still comes
// from the embedded set.
func TestOverrideDir(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"order_confirmed/en/subject.txt":  "Thanks! Order {{.OrderID}} is on its way to packing\r\n",
		"order_confirmed/settings.yaml":   "ambiguous_policy: unknown\nmax_event_age: 2h\n",
		"order_cancelled/vi/subject.txt":  "Đơn hàng {{.OrderID}} đã được hủy theo yêu cầu",
		"order_shipped/vi/subject.txt":    "Đơn hàng #{{.OrderID}} đang được giao",
		"order_shipped/vi/body.txt":       "Đơn hàng {{.OrderID}} đang được giao.",
		"order_shipped/vi/body.html":      "<p>Đơn hàng {{.OrderID}} đang được giao.</p>",
		".git/HEAD":                       "ref: x",
		"order_confirmed/.DS_Store/x.txt": "",
	})
	r, err := templates.New(templates.Options{Dir: dir})
	require.NoError(t, err)
	require.Equal(t, []string{templates.OrderCancelled, templates.OrderConfirmed, "order_shipped"}, r.Names())
	out, err := r.Render(templates.OrderCancelled, "vi", sampleOrder())
	require.NoError(t, err)
	require.Equal(t, "Đơn hàng 42 đã được hủy theo yêu cầu", out.Subject)
	require.True(t, strings.HasPrefix(out.Text, "Xin chào Nguyễn Văn B,\n\nĐơn hàng #42 của bạn đã bị hủy."), "body.txt still embedded")
	s, err := r.Settings(templates.OrderCancelled)
	require.NoError(t, err)
	require.Equal(t, templates.Settings{Lane: mailtype.LanePriority}, s, "settings.yaml still embedded")
	out, err = r.Render(templates.OrderConfirmed, "en", sampleOrder())
	require.NoError(t, err)
	require.Equal(t, "Thanks! Order 42 is on its way to packing", out.Subject)
	require.True(t, strings.HasPrefix(out.Text, "Hello Nguyễn Văn B,\n"), "body.txt still embedded")
	s, err = r.Settings(templates.OrderConfirmed)
	require.NoError(t, err)
	require.Equal(t, templates.Settings{AmbiguousPolicy: mailtype.PolicyUnknown, MaxEventAge: 2 * time.Hour}, s)
	s, err = r.Settings("order_shipped")
	require.NoError(t, err)
	require.Equal(t, templates.Settings{}, s, "no settings.yaml: the global config applies")
	out, err = r.Render("order_shipped", "en", sampleOrder())
	require.NoError(t, err)
	require.Equal(t, "vi", out.Locale)
	require.Equal(t, "<p>Đơn hàng 42 đang được giao.</p>", out.HTML)
}

// TestOverrideDirRefused checks that New fails, naming the problem, for
// every broken override.
func TestOverrideDirRefused(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		files map[string]string
		want  string
	}{
		"parse error":       {map[string]string{"order_confirmed/vi/body.html": "<p>{{.OrderID</p>"}, "order_confirmed/vi/body.html"},
		"unknown field":     {map[string]string{"order_confirmed/vi/body.txt": "{{.Password}}"}, "self-check"},
		"multiline subject": {map[string]string{"order_confirmed/vi/subject.txt": "a\n{{.OrderID}}"}, "one non-empty line"},
		"empty subject":     {map[string]string{"order_confirmed/en/subject.txt": "  \n"}, "one non-empty line"},
		"missing part":      {map[string]string{"order_shipped/vi/subject.txt": "x"}, "order_shipped/vi/body.txt"},
		"no default locale": {map[string]string{"order_shipped/en/subject.txt": "x", "order_shipped/en/body.txt": "x", "order_shipped/en/body.html": "x"}, `no default locale "vi"`},
		"bad policy":        {map[string]string{"order_confirmed/settings.yaml": "ambiguous_policy: maybe\n"}, "ambiguous_policy"},
		"bad age":           {map[string]string{"order_confirmed/settings.yaml": "max_event_age: -1h\n"}, "max_event_age"},
		"unknown key":       {map[string]string{"order_confirmed/settings.yaml": "max_age: 1h\n"}, "max_age"},
		"bad lane":          {map[string]string{"order_confirmed/settings.yaml": "lane: urgent\n"}, `order_confirmed/settings.yaml: lane: lane must be priority or bulk, got "urgent"`},
		"bad locale dir":    {map[string]string{"order_confirmed/Vietnamese/body.txt": "x"}, `"Vietnamese"`},
		"bad template dir":  {map[string]string{"Order Confirmed/vi/body.txt": "x"}, `"Order Confirmed"`},
		"notice parse":      {map[string]string{"order_cancelled/en/body.html": "<p>{{.OrderID</p>"}, "order_cancelled/en/body.html"},
		"notice field":      {map[string]string{"order_cancelled/vi/subject.txt": "{{.Refund}}"}, "order_cancelled/vi: self-check"},
		"notice settings":   {map[string]string{"order_cancelled/settings.yaml": "max_event_age: 3 days\n"}, "order_cancelled/settings.yaml: max_event_age"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := templates.New(templates.Options{Dir: writeFiles(t, c.files)})
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
	_, err := templates.New(templates.Options{Dir: filepath.Join(t.TempDir(), "absent")})
	require.ErrorContains(t, err, "not a readable directory")
}
