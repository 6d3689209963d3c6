package templates

import (
	"errors"
	"fmt"
	"html"
	"io/fs"
	"strings"
	"unicode"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// MaxNoticeBytes is the longest resend notice a template may carry.
const MaxNoticeBytes = 500

// loadNotice reads the optional resend notice at p: one line of plain
// text (no template syntax), "" when the file does not exist.
func loadNotice(ls layers, p string) (string, error) {
	b, where, err := ls.readFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	line := strings.TrimSpace(string(b))
	switch {
	case line == "":
		return "", fmt.Errorf("%s: empty: remove the file, or write the notice on one line", where)
	case len(line) > MaxNoticeBytes:
		return "", fmt.Errorf("%s: %d bytes, more than %d", where, len(line), MaxNoticeBytes)
	case strings.ContainsFunc(line, unicode.IsControl):
		return "", fmt.Errorf("%s: more than one line, or a control character: the notice is one line of plain text", where)
	}
	return line, nil
}

// ResendNotice returns the line a manual resend of a mail of template
// name in locale starts with ("If you already received this e-mail,
// please ignore it."): the file resend_notice.txt of that locale, else of
// the default locale. locale is resolved as Render resolves it. Errors: a
// permanent ReasonUnknownTemplate error for an unknown name, an error
// naming the template when neither locale has a notice.
func (r *Registry) ResendNotice(name, locale string) (string, error) {
	e, err := r.entry(name)
	if err != nil {
		return "", err
	}
	if n := e.locales[r.resolve(e, locale, "")].notice; n != "" {
		return n, nil
	}
	if n := e.locales[r.opts.DefaultLocale].notice; n != "" {
		return n, nil
	}
	return "", mailtype.Errorf(mailtype.Permanent, mailtype.ReasonRender,
		"template %s has no resend notice for locale %q nor for the default locale %q (%s)", name, locale, r.opts.DefaultLocale, fileNotice)
}

// AddResendNotice returns the text and HTML parts of a rendered mail with
// notice put first: its own paragraph at the top of the text part, and a
// paragraph (escaped) right after the HTML part's <body> tag (at the very
// start when it has none). The same arguments always give the same bytes.
// Parts whose text starts with the notice already (a resend of a resend
// copy) are returned as they are: the notice is said once.
func AddResendNotice(text, htmlPart, notice string) (string, string) {
	if strings.HasPrefix(text, notice+"\n\n") {
		return text, htmlPart // a copy of a copy that carries it already
	}
	text = notice + "\n\n" + text
	if htmlPart == "" {
		return text, htmlPart
	}
	p := `<p style="margin:0;padding:12px 24px;font-family:Arial,Helvetica,sans-serif;font-size:14px;line-height:20px;` +
		`background-color:#fef3c7;color:#111827;">` + html.EscapeString(notice) + "</p>\n"
	at := 0
	if i := strings.Index(strings.ToLower(htmlPart), "<body"); i >= 0 {
		if j := strings.IndexByte(htmlPart[i:], '>'); j >= 0 {
			at = i + j + 1
			if at < len(htmlPart) && htmlPart[at] == '\n' {
				at++
			}
		}
	}
	return text, htmlPart[:at] + p + htmlPart[at:]
}
