package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// MailView is one mail row as an operator sees it (`mailsvc mail show`),
// with the feedback events written for it. Optional columns that are NULL
// read as "" or a nil time.
type MailView struct {
	ID              int64           `json:"id"`
	EventID         string          `json:"event_id"` // "" for a tombstone
	DedupeKey       string          `json:"dedupe_key"`
	OrderID         string          `json:"order_id"`
	Revision        int             `json:"revision"`
	Template        string          `json:"template"`
	Locale          string          `json:"locale"`
	ToEmail         string          `json:"to_email"`
	Subject         string          `json:"subject"`
	MessageID       string          `json:"message_id"`
	Status          mailtype.Status `json:"status"`
	CancelRequested bool            `json:"cancel_requested"`
	CancelEventID   string          `json:"cancel_event_id,omitempty"`
	// Attempts is the number of claims (the fencing token); Sends the
	// sends that started, which max_attempts bounds and the feedback
	// events' attempts report.
	Attempts int `json:"attempts"`
	Sends    int `json:"sends"`
	// ReconciledSends is how many of Sends an operator settled as not
	// delivered (`mail reconcile --not-delivered`); sender.max_attempts
	// bounds only Sends - ReconciledSends. 0 for a mail never reconciled.
	ReconciledSends   int        `json:"reconciled_sends"`
	LockedUntil       *time.Time `json:"locked_until,omitempty"`
	LockedBy          string     `json:"locked_by,omitempty"`
	SendAfter         time.Time  `json:"send_after"`
	FirstAttemptAt    *time.Time `json:"first_attempt_at,omitempty"`
	Provider          string     `json:"provider,omitempty"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
	LastError         string     `json:"last_error,omitempty"`
	// LastErrorClass is the class of LastError (transient, permanent or
	// ambiguous; migration 00080), "" when there is none.
	LastErrorClass mailtype.Class `json:"last_error_class,omitempty"`
	OccurredAt     *time.Time     `json:"occurred_at,omitempty"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      time.Time      `json:"updated_at"`
	SentAt         *time.Time     `json:"sent_at,omitempty"`
	// DeliveredAt is when the provider reported the mail delivered to the
	// recipient's server (a webhook; migration 00090), nil until then.
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// DeliveryDelayedAt is when the provider last reported that it is still
	// trying to deliver the mail (migration 00160), nil when it never did.
	DeliveryDelayedAt *time.Time `json:"delivery_delayed_at,omitempty"`
	// Reconciliation says how an `unknown` mail was settled without an
	// operator (migration 00190); nil for every other mail.
	Reconciliation *Reconciliation `json:"reconciliation,omitempty"`
	// DeliveryUnconfirmed is true when the mail is flagged "delivery
	// unconfirmed" by the store's DeliveryConfirm rule, judged on the
	// database's clock when it was read.
	DeliveryUnconfirmed bool           `json:"delivery_unconfirmed"`
	Feedback            []FeedbackView `json:"feedback"`
	// AttachState is the state of the mail's attachments ("" for none:
	// pending, ready or failed; docs/design.md, "Attachments") and
	// Attachments each file's.
	AttachState string           `json:"attach_state,omitempty"`
	Attachments []AttachmentView `json:"attachments,omitempty"`
}

// Reconciliation is how an `unknown` mail was settled by its provider's
// report (reconciliation by provider evidence).
type Reconciliation struct {
	// By is ReconciledByEvidence.
	By string `json:"by"`
	// At is when mailsvc settled the mail.
	At time.Time `json:"at"`
	// EvidenceType and EvidenceID name the report, as its
	// data.provider_event does (type, webhook_id); EvidenceAt is when the
	// provider recorded it.
	EvidenceType string    `json:"evidence_type"`
	EvidenceID   string    `json:"evidence_id"`
	EvidenceAt   time.Time `json:"evidence_at"`
}

// FeedbackView is one outbox row (a feedback event on mail.events) of a mail.
type FeedbackView struct {
	EventID     string             `json:"event_id"`
	EventType   mailtype.EventType `json:"event_type"`
	RoutingKey  string             `json:"routing_key"`
	CreatedAt   time.Time          `json:"created_at"`
	PublishedAt *time.Time         `json:"published_at,omitempty"`
	Attempts    int                `json:"attempts"`
	LastError   string             `json:"last_error,omitempty"`
	DeadAt      *time.Time         `json:"dead_at,omitempty"`
}

var mailViewColumns = `
id, COALESCE(event_id::text, ''), dedupe_key, order_id, template, locale, to_email, subject,
message_id, status, cancel_requested, COALESCE(cancel_event_id::text, ''), attempts,
locked_until, COALESCE(locked_by, ''), send_after, first_claimed_at, COALESCE(provider, ''),
COALESCE(provider_message_id, ''), COALESCE(last_error, ''), occurred_at, created_at,
updated_at, sent_at, revision, sends, COALESCE(last_error_class, ''), delivered_at, delivery_delayed_at,
COALESCE(reconciled_by, ''), reconciled_at, COALESCE(evidence_type, ''), COALESCE(evidence_id, ''), evidence_at, budget_base,
COALESCE(` + unconfirmed(2) + `, false), COALESCE(attach_state, '')`

// mailViewArgs are the arguments of a mail view query after its own $1:
// the DeliveryConfirm rule ($2, $3).
func (s *Store) mailViewArgs(first any) []any { return append([]any{first}, s.confirm.args()...) }

const feedbackViewSQL = `
SELECT event_id::text, event_type, routing_key, created_at, published_at, attempts,
       COALESCE(last_error, ''), dead_at
FROM outbox WHERE dedupe_key = $1 ORDER BY id`

func scanMailView(row pgx.Row) (MailView, error) {
	var m MailView
	var r Reconciliation
	var at, evidenceAt *time.Time
	err := row.Scan(&m.ID, &m.EventID, &m.DedupeKey, &m.OrderID, &m.Template, &m.Locale, &m.ToEmail,
		&m.Subject, &m.MessageID, &m.Status, &m.CancelRequested, &m.CancelEventID, &m.Attempts,
		&m.LockedUntil, &m.LockedBy, &m.SendAfter, &m.FirstAttemptAt, &m.Provider,
		&m.ProviderMessageID, &m.LastError, &m.OccurredAt, &m.CreatedAt, &m.UpdatedAt, &m.SentAt, &m.Revision, &m.Sends,
		&m.LastErrorClass, &m.DeliveredAt, &m.DeliveryDelayedAt, &r.By, &at, &r.EvidenceType, &r.EvidenceID, &evidenceAt,
		&m.ReconciledSends, &m.DeliveryUnconfirmed, &m.AttachState)
	if err == nil && r.By != "" && at != nil && evidenceAt != nil {
		r.At, r.EvidenceAt = *at, *evidenceAt
		m.Reconciliation = &r
	}
	return m, err
}

// MailByKey returns the mail with dedupeKey and its feedback events, oldest
// first. It returns ErrNotFound when no row has that key, and a transient
// *mailtype.Error (ReasonDatabase) when the database is unreachable.
func (s *Store) MailByKey(ctx context.Context, dedupeKey string) (MailView, error) {
	m, err := scanMailView(s.pool.QueryRow(ctx, "SELECT "+mailViewColumns+" FROM mail WHERE dedupe_key = $1", s.mailViewArgs(dedupeKey)...))
	if err != nil {
		return MailView{}, fmt.Errorf("read mail %q: %w", dedupeKey, interpretError(err))
	}
	if m.Feedback, err = s.feedbackOf(ctx, dedupeKey); err != nil {
		return MailView{}, err
	}
	if m.Attachments, err = s.attachmentsOf(ctx, m.ID); err != nil {
		return MailView{}, err
	}
	return m, nil
}

// MailsByOrder returns every mail of orderID (the confirmation, its
// resends, tombstones) in creation order, each with its feedback events.
// No mail gives an empty slice and a nil error. An order id that is
// blank, not valid UTF-8 or holds a NUL byte is an error wrapping
// ErrBadQuery.
func (s *Store) MailsByOrder(ctx context.Context, orderID string) ([]MailView, error) {
	if err := checkOrderID(orderID); err != nil {
		return nil, fmt.Errorf("read mails of order: %w", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT "+mailViewColumns+" FROM mail WHERE order_id = $1 ORDER BY id", s.mailViewArgs(orderID)...)
	if err != nil {
		return nil, fmt.Errorf("read mails of order %q: %w", orderID, interpretError(err))
	}
	mails, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MailView, error) { return scanMailView(r) })
	if err != nil {
		return nil, fmt.Errorf("read mails of order %q: %w", orderID, interpretError(err))
	}
	for i := range mails {
		if mails[i].Feedback, err = s.feedbackOf(ctx, mails[i].DedupeKey); err != nil {
			return nil, err
		}
		if mails[i].Attachments, err = s.attachmentsOf(ctx, mails[i].ID); err != nil {
			return nil, err
		}
	}
	return mails, nil
}

func (s *Store) feedbackOf(ctx context.Context, dedupeKey string) ([]FeedbackView, error) {
	rows, err := s.pool.Query(ctx, feedbackViewSQL, dedupeKey)
	if err != nil {
		return nil, fmt.Errorf("read feedback of %q: %w", dedupeKey, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FeedbackView, error) {
		var f FeedbackView
		err := r.Scan(&f.EventID, &f.EventType, &f.RoutingKey, &f.CreatedAt, &f.PublishedAt, &f.Attempts, &f.LastError, &f.DeadAt)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("read feedback of %q: %w", dedupeKey, interpretError(err))
	}
	return out, nil
}

// Stats is a snapshot of the database-derived gauges (docs/design.md, "Metrics").
type Stats struct {
	// Mails counts mail rows per status; every status of
	// mailtype.Statuses is present, 0 when no row has it.
	Mails map[mailtype.Status]int64
	// OldestPendingAge is the age (now - created_at) of the oldest pending
	// mail, backoff waits included; 0 when none is pending.
	OldestPendingAge time.Duration
	// OutboxPending counts outbox rows neither published nor dead.
	OutboxPending int64
	// OutboxOldestAge is the age of the oldest of those; 0 when none.
	OutboxOldestAge time.Duration
	// OutboxDead counts outbox rows the relay gave up on (dead_at set).
	OutboxDead int64
	// Unconfirmed counts the mails flagged "delivery unconfirmed" by the
	// store's DeliveryConfirm rule, by provider; a provider without any
	// is absent.
	Unconfirmed map[string]int64
	// UnconfirmedRecent counts, by provider, those of Unconfirmed whose
	// deadline (sent_at + DeliveryConfirm.After) passed within the last
	// UnconfirmedWindow: the mails that became unconfirmed in that window
	// and still are, a rate per UnconfirmedWindow.
	UnconfirmedRecent map[string]int64
}

// statusCountsSQL is the mail count per status as one JSON object, at a
// cost that does not grow with finished rows: the statuses with work left
// through their partial indexes (mail_active_idx, mail_held_idx), the
// finished ones from the counters of migration 00100 (their totals plus
// the deltas not folded in yet). Stats and Overview read it.
const statusCountsSQL = `(SELECT COALESCE(json_object_agg(status, n), '{}') FROM (
      SELECT status, count(*) AS n FROM mail WHERE status IN ('pending', 'sending', 'unknown') GROUP BY status
      UNION ALL
      SELECT 'held', count(*) FROM mail WHERE status = 'held'
      UNION ALL
      SELECT status, sum(n)::bigint FROM (
          SELECT status, n FROM mail_status_total UNION ALL SELECT status, n FROM mail_status_delta) f
      GROUP BY status) c)`

// statsSQL computes every gauge in one round trip, at a cost that does not
// grow with finished rows: the counts per status (statusCountsSQL); the
// other parts read partial indexes of unpublished and dead outbox rows,
// and the delivery-unconfirmed mails through mail_unconfirmed_idx, whose
// rows are those of the last minutes and those really missing a report
// ($1 and $2 are the DeliveryConfirm rule, $3 UnconfirmedWindow).
var statsSQL = `
SELECT
  ` + statusCountsSQL + `,
  (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) FROM mail WHERE status = 'pending' AND NOT cancel_requested),
  (SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL),
  (SELECT COALESCE(json_object_agg(provider, json_build_array(n, recent)), '{}') FROM (
      SELECT provider, count(*) AS n, count(*) FILTER (WHERE sent_at > now() - $2::interval - $3::interval) AS recent
      FROM mail WHERE ` + unconfirmed(1) + `
      GROUP BY provider) u)`

// compactStatusCountsSQL folds the deltas of the finished-mail counters
// into their totals in one statement, so a reader sees them either before
// or after, never half. SKIP LOCKED lets replicas compact at the same time
// without waiting for each other (each folds the rows it locked); the
// totals are then updated in status order, so two folds cannot deadlock.
const compactStatusCountsSQL = `
WITH moved AS (
    DELETE FROM mail_status_delta d
    USING (SELECT id FROM mail_status_delta FOR UPDATE SKIP LOCKED) l
    WHERE d.id = l.id
    RETURNING d.status, d.n
), folded AS (
    INSERT INTO mail_status_total AS t (status, n)
    SELECT status, sum(n) FROM moved GROUP BY status ORDER BY status
    ON CONFLICT (status) DO UPDATE SET n = t.n + excluded.n
)
SELECT count(*) FROM moved`

// CompactStatusCounts folds the pending deltas of the finished-mail
// counters (migration 00100) into their totals and returns how many delta
// rows it folded. Stats is exact with or without it; it only keeps the
// delta table small, so the stats collector calls it before each read.
// It writes, so a read-only database refuses it (a transient
// *mailtype.Error, ReasonDatabase, as for an unreachable one) while Stats
// still answers.
func (s *Store) CompactStatusCounts(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, compactStatusCountsSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("fold mail status counters: %w", interpretError(err))
	}
	return n, nil
}

// Stats reads the snapshot of the database-derived gauges in one
// statement. It returns a transient *mailtype.Error (ReasonDatabase) when
// the database is unreachable.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var counts map[string]int64
	var unconfirmed map[string][2]int64
	var pendingAge, outboxAge float64
	st := Stats{Mails: make(map[mailtype.Status]int64, len(mailtype.Statuses)),
		Unconfirmed: map[string]int64{}, UnconfirmedRecent: map[string]int64{}}
	err := s.pool.QueryRow(ctx, statsSQL, append(s.confirm.args(), UnconfirmedWindow)...).
		Scan(&counts, &pendingAge, &st.OutboxPending, &outboxAge, &st.OutboxDead, &unconfirmed)
	if err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", interpretError(err))
	}
	for p, n := range unconfirmed {
		st.Unconfirmed[p], st.UnconfirmedRecent[p] = n[0], n[1]
	}
	for _, status := range mailtype.Statuses {
		st.Mails[status] = counts[string(status)]
	}
	st.OldestPendingAge = secondsToDuration(pendingAge)
	st.OutboxOldestAge = secondsToDuration(outboxAge)
	return st, nil
}

func secondsToDuration(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
