package store

import (
	"context"
	"fmt"
)

// ResendEdit rewrites the content of a resend copy of a mail of template
// in locale (its text and HTML parts as stored) before the copy is
// written, once: the copy is then stored, and each of its attempts sends
// those bytes. An error refuses the resend. operator.Actions.ResendWith
// adds the resend notice with it.
type ResendEdit func(template, locale, text, html string) (string, string, error)

// edit applies e (nil: nothing) to src's parts.
func (src *resendSource) edit(e ResendEdit) error {
	if e == nil {
		return nil
	}
	text, html, err := e(src.template, src.locale, src.text, src.html)
	if err != nil {
		return fmt.Errorf("edit the copy of a %s mail in %q: %w", src.template, src.locale, err)
	}
	src.text, src.html = text, html
	return nil
}

// ResendEdited is Resend with the copy's content rewritten by edit (nil:
// as Resend). The original row is never changed.
func (s *Store) ResendEdited(ctx context.Context, dedupeKey, domain, namespace string, edit ResendEdit) (string, error) {
	return s.resend(ctx, dedupeKey, domain, namespace, edit, true)
}

// ResendEditedDryRun is ResendDryRun with edit run as ResendEdited runs
// it (so that an edit that would fail refuses the dry run too).
func (s *Store) ResendEditedDryRun(ctx context.Context, dedupeKey, domain, namespace string, edit ResendEdit) (string, error) {
	return s.resend(ctx, dedupeKey, domain, namespace, edit, false)
}
