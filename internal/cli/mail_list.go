package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// listFlags are the flags of `mail list`.
type listFlags struct {
	f                                            store.MailFilter
	status, recipient, since, until, order, prov string
	offset                                       int
	asJSON                                       bool
}

// searching reports whether a flag of the search (any status, recipient,
// time range, order, provider, offset) was given: those lists go through
// store.SearchMails; one work status alone, or --unconfirmed, keep their
// own list (store.ListMails, oldest change first).
func (l *listFlags) searching(cmd *cobra.Command) bool {
	for _, name := range []string{"recipient", "since", "until", "order", "provider", "offset"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return !l.f.Unconfirmed && !slices.Contains(store.ListableStatuses, mailtype.Status(l.status))
}

func newMailListCmd(e *env) *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use: "list [--status S[,S...]] [--recipient ADDRESS] [--since T] [--until T] [--template T] [--provider P] " +
			"[--order newest|oldest] [--limit N] [--offset N] [--json] | --status unknown|failed|pending|sending|held [--older-than D] | --unconfirmed",
		Short: "List mails: of any status, by recipient, time, template or provider, newest first; or one work status, oldest change first; " +
			"or the sent mails whose delivery is unconfirmed",
		Example: "  mailsvc mail list --recipient ann@example.com\n" +
			"  mailsvc mail list --status sent,cancelled --since 24h --order oldest\n" +
			"  mailsvc mail list --status unknown --older-than 1h\n" +
			"  mailsvc mail list --status failed --template order_confirmed --limit 500 --json\n" +
			"  mailsvc mail list --unconfirmed --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if l.searching(cmd) {
				q, err := l.query(time.Now())
				if err != nil {
					return err
				}
				return e.withReadStore(func(cfg *config.Config, st *store.Store) error { return searchMails(e, cfg, st, q, l.asJSON) })
			}
			l.f.Status = mailtype.Status(l.status)
			if err := checkListFlags(l.f); err != nil {
				return err
			}
			return e.withReadStore(func(cfg *config.Config, st *store.Store) error { return listMails(e, cfg, st, l.f, l.asJSON) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&l.status, "status", "", "only these statuses, comma-separated: "+joinStatuses(mailtype.Statuses)+" (default: every status)")
	fl.BoolVar(&l.f.Unconfirmed, "unconfirmed", false, "sent mails with no delivery or bounce report after mail.delivery_confirm_after")
	fl.DurationVar(&l.f.OlderThan, "older-than", 0, "with one work status or --unconfirmed: only mails whose row last changed (with --unconfirmed: that were sent) at least this long ago (e.g. 30m, 1h, 48h)")
	fl.StringVar(&l.f.Template, "template", "", "only mails of this template (order_confirmed, order_cancelled)")
	fl.StringVar(&l.recipient, "recipient", "", "only mails to this address, compared case-insensitively (local part included: Ann@x.example finds ann@x.example too)")
	fl.StringVar(&l.since, "since", "", "only mails received at or after T: a time (2026-12-06T10:00:00Z, 2026-12-06) or a duration ago (24h)")
	fl.StringVar(&l.until, "until", "", "only mails received before T (as --since)")
	fl.StringVar(&l.prov, "provider", "", "only mails sent through this provider (smtp, resend)")
	fl.StringVar(&l.order, "order", "newest", "newest or oldest first, by receipt (search only)")
	fl.IntVar(&l.f.Limit, "limit", 100, fmt.Sprintf("at most this many mails (a search: 1..%d)", store.MaxPageSize))
	fl.IntVar(&l.offset, "offset", 0, "skip this many mails first (search only)")
	fl.BoolVar(&l.asJSON, "json", false, "print a JSON array")
	cmd.MarkFlagsMutuallyExclusive("status", "unconfirmed")
	return cmd
}

func joinStatuses(ss []mailtype.Status) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

// query is the store.MailQuery of the search flags, judged at now (a
// --since or --until given as a duration is that long before now).
func (l *listFlags) query(now time.Time) (store.MailQuery, error) {
	q := store.MailQuery{Template: l.f.Template, Provider: l.prov, Limit: l.f.Limit, Offset: l.offset}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if l.f.Unconfirmed || l.f.OlderThan != 0 {
		bad("--unconfirmed and --older-than go with one work status alone (unknown, failed, pending, sending, held); in a search use --until")
	}
	for s := range strings.SplitSeq(l.status, ",") {
		st := mailtype.Status(strings.TrimSpace(s))
		switch {
		case st == "" && l.status == "":
		case !slices.Contains(mailtype.Statuses, st):
			bad("--status: %q is not a status (%s)", st, joinStatuses(mailtype.Statuses))
		default:
			q.Statuses = append(q.Statuses, st)
		}
	}
	if l.recipient != "" {
		addr, err := operator.Address(l.recipient)
		if err != nil {
			return q, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("--recipient: %w", err)}
		}
		q.Recipient = addr
	}
	var err error
	if q.Since, err = parseWhen(l.since, now); err != nil {
		bad("--since: %v", err)
	}
	if q.Until, err = parseWhen(l.until, now); err != nil {
		bad("--until: %v", err)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		bad("--since must be before --until")
	}
	switch l.order {
	case "newest":
	case "oldest":
		q.Oldest = true
	default:
		bad("--order must be newest or oldest, got %q", l.order)
	}
	if q.Limit < 1 || q.Limit > store.MaxPageSize || q.Offset < 0 {
		bad("--limit must be 1..%d and --offset not negative in a search", store.MaxPageSize)
	}
	if len(errs) > 0 {
		return q, &ExitError{Code: ExitInvalid, Err: errors.Join(errs...)}
	}
	return q, nil
}

// parseWhen reads a --since or --until: "" (no bound), an RFC 3339 time,
// a date (midnight UTC), or a duration before now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2026-12-06T10:00:00Z, 2026-12-06) nor a positive duration (24h)", s)
}

// searchMails prints the page of q (store.SearchMails), and on stderr how
// many match when more do than were printed.
func searchMails(e *env, cfg *config.Config, st *store.Store, q store.MailQuery, asJSON bool) error {
	page, err := st.SearchMails(e.ctx, q)
	if errors.Is(err, store.ErrBadQuery) {
		return &ExitError{Code: ExitInvalid, Err: err}
	}
	if err != nil {
		return storeError(cfg, "", err)
	}
	if shown := int64(page.Offset + len(page.Mails)); page.Total > shown || page.TotalCapped {
		more := fmt.Sprint(page.Total)
		if page.TotalCapped {
			more = "more than " + more
		}
		fmt.Fprintf(e.stderr, "showing %d to %d of %s matching mails (page with --offset, or narrow the search)\n", page.Offset+1, shown, more)
	}
	if asJSON {
		return writeJSON(e.stdout, append([]store.MailSummary{}, page.Mails...))
	}
	return writeMailList(e.stdout, page.Mails)
}

// listMails prints one work status's mails or the unconfirmed ones
// (store.ListMails).
func listMails(e *env, cfg *config.Config, st *store.Store, f store.MailFilter, asJSON bool) error {
	mails, more, err := st.ListMails(e.ctx, f)
	if errors.Is(err, store.ErrUnconfirmedOff) {
		return &ExitError{Code: 1, Err: fmt.Errorf("%w (mail.delivery_confirm_after is %s; resend reports with webhooks.resend_secret set, smtp with bounces.address and SUCCESS in bounces.notify)",
			store.ErrUnconfirmedOff, cfg.Mail.DeliveryConfirmAfter)}
	}
	if err != nil {
		return storeError(cfg, "", err)
	}
	if more {
		fmt.Fprintf(e.stderr, "showing the first %d; more match (raise --limit, or narrow with --older-than or --template)\n", f.Limit)
	}
	if asJSON {
		return writeJSON(e.stdout, append([]store.MailSummary{}, mails...))
	}
	return writeMailList(e.stdout, mails)
}

// checkListFlags returns the exit error of invalid flags of a work
// status's list.
func checkListFlags(f store.MailFilter) error {
	if f.Limit <= 0 || f.OlderThan < 0 {
		return &ExitError{Code: ExitInvalid, Err: errors.New("--limit must be positive and --older-than not negative")}
	}
	return nil
}

func writeMailList(w io.Writer, mails []store.MailSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(operator.ListHeader, "\t"))
	now := time.Now()
	for _, m := range mails {
		fmt.Fprintln(tw, strings.Join(operator.ListRow(m, now), "\t"))
	}
	return tw.Flush()
}
