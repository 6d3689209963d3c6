package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Reconciler settles one unknown mail by what the operator found out;
// *store.Store implements it (store.Store.Reconcile and its dry run).
type Reconciler interface {
	Reconcile(ctx context.Context, dedupeKey string, delivered bool) (store.ReconcileResult, error)
	ReconcileDryRun(ctx context.Context, dedupeKey string, delivered bool) (store.ReconcileResult, error)
}

// KeyLine is one key of a `--from` file: its line number (from 1), the
// key normalised by Key, or, when the line cannot be a key, the line as
// read (space around it removed) and Err, the *InputError saying why.
type KeyLine struct {
	Line int
	Key  string
	Err  error
}

// ReadKeyLines reads dedupe keys, one a line, for `mailsvc mail reconcile
// --from`: a byte-order mark at the start of the file is dropped, each
// line is normalised by Key (space around it, no-break space included,
// removed), and empty lines and lines starting with # are skipped. A line
// that cannot be a key (not UTF-8, a control character, over-long) is
// returned with its Err, so that the keys after it are still done. It
// returns the keys in file order, duplicates included, or the read error.
func ReadKeyLines(r io.Reader) ([]KeyLine, error) {
	var keys []KeyLine
	err := eachLine(r, func(n int, line string) error {
		k, err := Key(line)
		if err != nil {
			k = line
		}
		keys = append(keys, KeyLine{Line: n, Key: k, Err: err})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	return keys, nil
}

// Disposition says what happened to one key of a bulk reconcile.
type Disposition string

const (
	// Reconciled: the mail was settled (or, in a dry run, would be).
	Reconciled Disposition = "reconciled"
	// NotFound: no mail has the key.
	NotFound Disposition = "not_found"
	// Refused: the mail is not unknown (a *store.StateError).
	Refused Disposition = "refused"
	// Invalid: the key cannot be a key (an *InputError): nothing was
	// looked up; the run goes on.
	Invalid Disposition = "invalid"
	// Duplicate: the key came earlier in the list; it is done once.
	Duplicate Disposition = "duplicate"
	// Failed: the database failed on this key (unreachable, or refused
	// the statement); the run stops there.
	Failed Disposition = "failed"
	// Skipped: not attempted, because the run stopped on a failed key.
	Skipped Disposition = "skipped"
)

// KeyResult is what a bulk reconcile did with one key.
type KeyResult struct {
	Key         string
	Disposition Disposition
	// Result is the mail's new status and feedback event (Reconciled).
	Result store.ReconcileResult
	// Err is why the key was not reconciled (NotFound, Refused, Failed).
	Err error
}

// Summary counts the dispositions of the keys of a bulk reconcile.
type Summary map[Disposition]int

// OK reports whether every key was reconciled or was a duplicate.
func (s Summary) OK() bool {
	return s[NotFound]+s[Refused]+s[Failed]+s[Skipped]+s[Invalid] == 0
}

// ReconcileKeys settles keys in order, one transaction each (the logic of
// a single `mailsvc mail reconcile KEY`: store.Store.Reconcile), or only
// says what it would do when dryRun (store.Store.ReconcileDryRun, which
// rolls back). It calls report once per key, in order, as soon as that key
// is done. A key not found or refused does not stop the run; a database
// failure does (the keys after it are Skipped), since every further key
// would fail the same way; so does a key that is not one (Invalid). A key
// repeated in keys is done once.
func ReconcileKeys(ctx context.Context, r Reconciler, keys []string, delivered, dryRun bool, report func(KeyResult)) Summary {
	sum := Summary{}
	seen := make(map[string]bool, len(keys))
	stopped := false
	for _, k := range keys {
		res := KeyResult{Key: k}
		switch {
		case seen[k] && isKey(k):
			res.Disposition = Duplicate
		case stopped:
			res.Disposition = Skipped
		default:
			seen[k] = true
			res = reconcileOne(ctx, r, k, delivered, dryRun)
			stopped = res.Disposition == Failed
		}
		sum[res.Disposition]++
		report(res)
	}
	return sum
}

func reconcileOne(ctx context.Context, r Reconciler, key string, delivered, dryRun bool) KeyResult {
	do := r.Reconcile
	if dryRun {
		do = r.ReconcileDryRun
	}
	got, err := do(ctx, key, delivered)
	var se *store.StateError
	switch {
	case err == nil:
		return KeyResult{Key: key, Disposition: Reconciled, Result: got}
	case errors.Is(err, ErrInvalidInput):
		return KeyResult{Key: key, Disposition: Invalid, Err: err}
	case errors.Is(err, store.ErrNotFound):
		return KeyResult{Key: key, Disposition: NotFound, Err: err}
	case errors.As(err, &se):
		return KeyResult{Key: key, Disposition: Refused, Err: se}
	}
	return KeyResult{Key: key, Disposition: Failed, Err: err}
}

// ReconcileLine is the line `mailsvc mail reconcile` prints for one key,
// starting with the key: its new status and the event written, or what a
// dry run would do, or why nothing was done. The line of a key that is
// not one (Invalid) starts with "not reconciled:" and quotes it.
func ReconcileLine(r KeyResult, dryRun bool) string {
	switch r.Disposition {
	case Reconciled:
		return r.Key + " " + reconciledText(r.Result, dryRun)
	case NotFound:
		return r.Key + " not reconciled: no mail has this dedupe key"
	case Refused, Failed:
		return r.Key + " not reconciled: " + strings.Join(strings.Fields(r.Err.Error()), " ")
	case Invalid:
		return "not reconciled: " + r.Err.Error()
	case Duplicate:
		return r.Key + " skipped: listed before, done once"
	case Skipped:
		return r.Key + " not attempted: the run stopped at a database failure"
	}
	return r.Key + " " + string(r.Disposition)
}

func reconciledText(res store.ReconcileResult, dryRun bool) string {
	if dryRun {
		msg := "would become " + string(res.Status)
		if res.Feedback != "" {
			msg += "; " + string(res.Feedback) + " would be written to the outbox"
		}
		return msg + " (dry run: nothing changed)"
	}
	msg := "is now " + string(res.Status)
	if res.Feedback != "" {
		msg += "; " + string(res.Feedback) + " written to the outbox"
	}
	if res.Status == mailtype.StatusPending {
		msg += "; a sender will attempt it again now"
	}
	return msg
}

// isKey reports whether k is a key as Key would return it: lines that are
// not keys are each reported, never taken for duplicates.
func isKey(k string) bool {
	n, err := Key(k)
	return err == nil && n == k
}
