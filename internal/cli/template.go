package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/templates"
)

// templateFlags are the flags of `mailsvc template render`.
type templateFlags struct {
	name, locale, data     string
	dir, timeZone, defLang string
	html, text             bool
}

func newTemplateCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Work with the mail templates"}
	cmd.AddCommand(newTemplateRenderCmd(e))
	return cmd
}

func newTemplateRenderCmd(e *env) *cobra.Command {
	var f templateFlags
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Render a mail from event data, for people who edit templates",
		Long: "Render prints the subject, text and HTML parts of a mail. --data is a JSON file holding\n" +
			"either a whole OrderConfirmed event or only its \"data\" object (\"-\" reads stdin).\n" +
			"--template " + templates.OrderCancelled + " renders the cancellation notice from the same data:\n" +
			"the order as it was confirmed.\n" +
			"Template settings come from --config (templates.*) when given, then from the flags.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return e.renderTemplate(f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "template", templates.OrderConfirmed,
		"template name: "+templates.OrderConfirmed+" or "+templates.OrderCancelled+" (or one added in --dir)")
	fl.StringVar(&f.locale, "locale", "", `locale, e.g. vi or en ("" = the data's locale)`)
	fl.StringVar(&f.data, "data", "", `JSON file with the event or its data ("-" = stdin)`)
	fl.StringVar(&f.dir, "dir", "", "directory overriding the embedded templates (templates.dir)")
	fl.StringVar(&f.timeZone, "time-zone", "", "IANA zone for dates (templates.time_zone, default Asia/Ho_Chi_Minh)")
	fl.StringVar(&f.defLang, "default-locale", "", "locale for an unknown locale (templates.default_locale, default vi)")
	fl.BoolVar(&f.html, "html", false, "print only the HTML part")
	fl.BoolVar(&f.text, "text", false, "print only the text part")
	cmd.MarkFlagsMutuallyExclusive("html", "text")
	_ = cmd.MarkFlagRequired("data")
	return cmd
}

// renderTemplate runs `template render`. Bad flags or data exit with code 2.
func (e *env) renderTemplate(f templateFlags) error {
	opts := templates.Options{}
	if e.configPath != "" {
		cfg, err := e.load()
		if err != nil {
			return err
		}
		opts = templates.Options{Dir: cfg.Templates.Dir, DefaultLocale: cfg.Templates.DefaultLocale, TimeZone: cfg.Templates.TimeZone}
	}
	override(&opts.Dir, f.dir)
	override(&opts.TimeZone, f.timeZone)
	override(&opts.DefaultLocale, f.defLang)
	reg, err := templates.New(opts)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if !slices.Contains(reg.Names(), f.name) {
		return &ExitError{Code: 2, Err: fmt.Errorf("unknown template %q: want one of %s", f.name, strings.Join(reg.Names(), ", "))}
	}
	order, err := readOrder(f.data)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	out, err := reg.Render(f.name, f.locale, order)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("render %s: %w", f.name, err)}
	}
	switch {
	case f.html:
		_, err = io.WriteString(e.stdout, out.HTML)
	case f.text:
		_, err = io.WriteString(e.stdout, out.Text)
	default:
		_, err = fmt.Fprintf(e.stdout, "Subject: %s\nLocale: %s\n\n--- text/plain ---\n%s\n--- text/html ---\n%s",
			out.Subject, out.Locale, out.Text, out.HTML)
	}
	return err
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// eventJSON is an OrderConfirmed event (docs/contract.md, "Input") or, when Data
// is absent, its data object itself.
type eventJSON struct {
	OccurredAt time.Time  `json:"occurred_at"`
	Data       *orderJSON `json:"data"`
}

// orderJSON is the data of an OrderConfirmed event.
type orderJSON struct {
	// OrderID may be a JSON string or number.
	OrderID      json.RawMessage `json:"order_id"`
	Email        string          `json:"email"`
	CustomerName string          `json:"customer_name"`
	Locale       string          `json:"locale"`
	Currency     string          `json:"currency"`
	Total        string          `json:"total"`
	Items        []struct {
		SKU       string `json:"sku"`
		Name      string `json:"name"`
		Quantity  int    `json:"quantity"`
		UnitPrice string `json:"unit_price"`
	} `json:"items"`
}

// readOrder reads the --data file ("-" is stdin) into an Order.
func readOrder(path string) (templates.Order, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return templates.Order{}, fmt.Errorf("read data: %w", err)
	}
	var ev eventJSON
	if err := json.Unmarshal(b, &ev); err != nil {
		return templates.Order{}, fmt.Errorf("parse data %s: %w", path, err)
	}
	d := ev.Data
	if d == nil {
		d = new(orderJSON)
		if err := json.Unmarshal(b, d); err != nil {
			return templates.Order{}, fmt.Errorf("parse data %s: %w", path, err)
		}
	}
	id, err := orderIDText(d.OrderID)
	if err != nil {
		return templates.Order{}, fmt.Errorf("parse data %s: %w", path, err)
	}
	o := templates.Order{OrderID: id, Email: d.Email, CustomerName: d.CustomerName, Locale: d.Locale,
		Currency: d.Currency, Total: d.Total, OccurredAt: ev.OccurredAt}
	for _, it := range d.Items {
		o.Items = append(o.Items, templates.Item{SKU: it.SKU, Name: it.Name, Quantity: it.Quantity, UnitPrice: it.UnitPrice})
	}
	return o, nil
}

// orderIDText returns order_id as text: a JSON string's content or a JSON
// number's literal ("" when absent).
func orderIDText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		var n json.Number
		if len(raw) == 0 {
			return "", nil
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return "", fmt.Errorf("order_id: want a string or a number: %w", err)
		}
		return n.String(), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("order_id: %w", err)
	}
	return s, nil
}
