package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// AuditEntry is one operator action as the audit log keeps it: who, when,
// through what, what on which target, why, and the result.
type AuditEntry struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	Via       string    `json:"via"`                  // cli, console or api
	Action    string    `json:"action"`               // resend, reconcile, provider-resume, suppression-add, ...
	Target    string    `json:"target"`               // a dedupe key, an address, a provider, a queue
	DedupeKey string    `json:"dedupe_key,omitempty"` // the mail it appears on, if any
	Reason    string    `json:"reason"`
	Result    string    `json:"result"` // started, done, refused, failed
	Detail    string    `json:"detail,omitempty"`
}

// The values of AuditEntry.Via and AuditEntry.Result (closed sets, held
// by the table's CHECK constraints, migrations 00230 and 00270).
// AuditStarted is the intent record written before an action runs; the
// action's end sets done, refused or failed (FinishAudit). A row left
// started is an action whose process stopped before recording its result.
const (
	ViaCLI     = "cli"
	ViaConsole = "console"
	ViaAPI     = "api"

	AuditStarted = "started"
	AuditDone    = "done"
	AuditRefused = "refused"
	AuditFailed  = "failed"
)

// AuditResultUnknown is how a started row reads in `mailsvc audit list`
// and on a mail's timeline (AuditResultText).
const AuditResultUnknown = "outcome unknown: the process stopped before recording the result; check the mail"

// AuditResultText is result as a person reads it: AuditResultUnknown for
// AuditStarted, the result itself otherwise.
func AuditResultText(result string) string {
	if result == AuditStarted {
		return AuditResultUnknown
	}
	return result
}

// MaxAuditText bounds each text of an audit entry (actor, action, target,
// reason, detail), in bytes: a longer one is cut on a rune boundary.
const MaxAuditText = 1000

// MaxAuditPage is the largest AuditQuery.Limit.
const MaxAuditPage = 1000

// ErrInvalidAudit is wrapped by RecordAudit's refusal of an entry without
// an actor or an action, or with a Via or Result outside their sets: a
// bug of the caller, never the operator's input.
var ErrInvalidAudit = errors.New("invalid audit entry")

// AuditQuery selects audit entries, the newest first. Every set field must
// match exactly (AND); Since keeps the entries at or after it (zero: no
// bound); Limit is 1..MaxAuditPage.
type AuditQuery struct {
	DedupeKey, Actor, Action, Target string
	Since                            time.Time
	Limit                            int
}

const insertAuditSQL = `
INSERT INTO audit_log (actor, via, action, target, dedupe_key, reason, result, detail)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $8)
RETURNING id, at`

// RecordAudit appends e (its ID and At are set by the database) and
// returns it as stored. Texts are kept as valid UTF-8 without NUL bytes,
// at most MaxAuditText bytes each, so an operator's bad input is recorded
// rather than refused. It returns an error wrapping ErrInvalidAudit for an
// entry the log cannot hold (see there), or a transient *mailtype.Error
// (ReasonDatabase) when the database fails. Safe for concurrent use.
func (s *Store) RecordAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	e.Actor, e.Action, e.Target = auditText(e.Actor), auditText(e.Action), auditText(e.Target)
	e.DedupeKey, e.Reason, e.Detail = auditText(e.DedupeKey), auditText(e.Reason), auditText(e.Detail)
	if err := checkAudit(e); err != nil {
		return AuditEntry{}, fmt.Errorf("record audit: %w", err)
	}
	err := s.pool.QueryRow(ctx, insertAuditSQL, e.Actor, e.Via, e.Action, e.Target, e.DedupeKey, e.Reason, e.Result, e.Detail).
		Scan(&e.ID, &e.At)
	if err != nil {
		return AuditEntry{}, fmt.Errorf("record audit: %w", interpretError(err))
	}
	return e, nil
}

const finishAuditSQL = `
UPDATE audit_log SET result = $2, detail = $3,
    dedupe_key = CASE WHEN EXISTS (SELECT 1 FROM mail WHERE mail.dedupe_key = audit_log.dedupe_key) THEN dedupe_key END
WHERE id = $1 AND result = 'started'
RETURNING ` + auditColumns

// FinishAudit sets the result (done, refused or failed) and detail of the
// started row id that RecordAudit wrote before the action ran, and
// returns the row as stored. The detail is kept as RecordAudit keeps it.
// The row's dedupe key is cleared when no mail has it (an action refused
// for an unknown key appears on no timeline). It returns an error
// wrapping ErrInvalidAudit for another result, ErrNotFound when no started
// row has this id (finished already), or a transient *mailtype.Error
// (ReasonDatabase) when the database fails. Safe for concurrent use.
func (s *Store) FinishAudit(ctx context.Context, id int64, result, detail string) (AuditEntry, error) {
	if !slices.Contains([]string{AuditDone, AuditRefused, AuditFailed}, result) {
		return AuditEntry{}, fmt.Errorf("finish audit %d: %w: result %q is not done, refused or failed", id, ErrInvalidAudit, result)
	}
	var e AuditEntry
	err := s.pool.QueryRow(ctx, finishAuditSQL, id, result, auditText(detail)).
		Scan(&e.ID, &e.At, &e.Actor, &e.Via, &e.Action, &e.Target, &e.DedupeKey, &e.Reason, &e.Result, &e.Detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return AuditEntry{}, fmt.Errorf("finish audit %d: no started row: %w", id, ErrNotFound)
	}
	if err != nil {
		return AuditEntry{}, fmt.Errorf("finish audit %d: %w", id, interpretError(err))
	}
	return e, nil
}

func checkAudit(e AuditEntry) error {
	switch {
	case e.Actor == "" || e.Action == "":
		return fmt.Errorf("%w: an actor and an action are required", ErrInvalidAudit)
	case !slices.Contains([]string{ViaCLI, ViaConsole, ViaAPI}, e.Via):
		return fmt.Errorf("%w: via %q is not cli, console or api", ErrInvalidAudit, e.Via)
	case !slices.Contains([]string{AuditStarted, AuditDone, AuditRefused, AuditFailed}, e.Result):
		return fmt.Errorf("%w: result %q is not started, done, refused or failed", ErrInvalidAudit, e.Result)
	}
	return nil
}

// auditText is s as the log keeps it: invalid UTF-8 replaced by U+FFFD,
// NUL bytes (which PostgreSQL's text refuses) removed, cut to
// MaxAuditText bytes on a rune boundary.
func auditText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= MaxAuditText {
		return s
	}
	cut := MaxAuditText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

const auditColumns = `id, at, actor, via, action, target, COALESCE(dedupe_key, ''), reason, result, detail`

// ListAudit returns the entries of q, the newest first (by time, then by
// id). A Limit outside 1..MaxAuditPage, a text filter that is not valid
// UTF-8 or holds a NUL byte, or an Action not in AuditActions is an error
// wrapping ErrBadQuery that names the field;
// an unreachable database a transient *mailtype.Error (ReasonDatabase).
// An entry about one mail is found by DedupeKey through
// audit_log_mail_idx, the others by time through audit_log_at_idx.
func (s *Store) ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if err := q.check(); err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	where, args := auditWhere(q)
	sql := `SELECT ` + auditColumns + ` FROM audit_log` + where +
		` ORDER BY at DESC, id DESC LIMIT $` + strconv.Itoa(len(args)+1)
	rows, err := s.pool.Query(ctx, sql, append(args, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		return e, r.Scan(&e.ID, &e.At, &e.Actor, &e.Via, &e.Action, &e.Target, &e.DedupeKey, &e.Reason, &e.Result, &e.Detail)
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", interpretError(err))
	}
	return out, nil
}

// check returns the error of an invalid query, naming the field.
func (q AuditQuery) check() error {
	if q.Limit < 1 || q.Limit > MaxAuditPage {
		return fmt.Errorf("%w: limit must be 1..%d, got %d", ErrBadQuery, MaxAuditPage, q.Limit)
	}
	if err := checkQueryTexts("dedupe_key", q.DedupeKey, "actor", q.Actor, "action", q.Action, "target", q.Target); err != nil {
		return err
	}
	if q.Action != "" && !slices.Contains(AuditActions, q.Action) {
		return fmt.Errorf("%w: action: no action %q: one of %s", ErrBadQuery, q.Action, strings.Join(AuditActions, ", "))
	}
	return nil
}

// auditWhere builds the WHERE clause of q from fixed conditions, each
// with its own parameter; no value is ever written into the SQL.
func auditWhere(q AuditQuery) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1))
	}
	for _, c := range []struct{ cond, v string }{
		{"dedupe_key = ?", q.DedupeKey}, {"actor = ?", q.Actor}, {"action = ?", q.Action}, {"target = ?", q.Target},
	} {
		if c.v != "" {
			add(c.cond, c.v)
		}
	}
	if !q.Since.IsZero() {
		add("at >= ?", q.Since)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}
