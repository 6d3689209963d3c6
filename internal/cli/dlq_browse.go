package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/operator"
)

// filterFlags are the dead-letter filters of list, replay and skip.
type filterFlags struct {
	f deadletter.Filter
}

// bind adds the filters to cmd; reasonFlag names the reason filter
// (--reason on list, --error-reason where --reason is the audit text).
func (ff *filterFlags) bind(cmd *cobra.Command, reasonFlag string) {
	cmd.Flags().StringVar(&ff.f.Reason, reasonFlag, "", "only messages dead-lettered for this reason (too_large, malformed_json, delivery_limit, ...)")
	cmd.Flags().StringVar(&ff.f.RoutingKey, "routing-key", "", "only messages first published with this routing key")
	cmd.Flags().DurationVar(&ff.f.OlderThan, "older-than", 0, "only messages dead-lettered longer ago than this (e.g. 2h)")
}

// browseDLQ opens a connection and runs visit over cfg's dead-letter
// queue (deadletter.Sweep).
func browseDLQ(cfg *config.Config, name string, visit deadletter.Visit) error {
	conn, err := broker.Dial(operatorBroker(cfg, name))
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("%w (check amqp.url and amqp.tls_*, or start RabbitMQ)", err)}
	}
	defer conn.Close()
	_, err = deadletter.Sweep(conn, cfg.AMQP.DeadLetterQueue, visit)
	if errors.Is(err, broker.ErrNoQueue) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("%w (amqp.dead_letter_queue; `mailsvc serve` declares it)", err)}
	}
	return replayExit(err)
}

func newDLQListCmd(e *env) *cobra.Command {
	var ff filterFlags
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--reason R] [--routing-key K] [--older-than D] [--limit N] [--json]",
		Short: "List dead-lettered messages in queue order: id, reason, routing key, failures, age, the body's first bytes",
		Long: `Lists the dead-lettered messages, in queue order, and leaves them all in the queue, in their
order: it reads each with basic.get and holds it until the listing ends, then the broker puts them
back. Meanwhile a replay or another listing sees none of them. ID names a message for
` + "`dlq show`" + ` and ` + "`dlq skip`" + `; it does not change while the message waits.`,
		Example: "  mailsvc dlq list\n  mailsvc dlq list --reason malformed_json --older-than 1h --json",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return &ExitError{Code: ExitInvalid, Err: errors.New("--limit must be >= 0")}
			}
			cfg, err := e.loadBroker()
			if err != nil {
				return err
			}
			now := time.Now()
			var list []deadletter.Entry
			total := 0
			err = browseDLQ(cfg, "mailsvc-dlq-list", func(en deadletter.Entry, _ func() error) error {
				total++
				if ff.f.Match(en, now) && (limit == 0 || len(list) < limit) {
					list = append(list, en)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, jsonEntries(list, now))
			}
			return writeDLQList(e.stdout, list, total, now)
		},
	}
	ff.bind(cmd, "reason")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most N messages (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (full bodies and headers)")
	return cmd
}

func writeDLQList(w io.Writer, list []deadletter.Entry, total int, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POS\tID\tMESSAGE_ID\tREASON\tROUTING_KEY\tFAILURES\tAGE\tBODY")
	for _, en := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", en.Position, en.ID, orDash(en.MessageID), orDash(en.Reason),
			orDash(en.RoutingKey), failures(en), age(en, now), operator.BodyExcerpt(en.Body, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d dead-lettered messages shown; all are still in the queue\n", len(list), total)
	return err
}

// failures says how often a message failed: the consumer's dead-lettering
// and the replays that came back, or the broker's x-death count.
func failures(en deadletter.Entry) string {
	if en.Deaths > 0 {
		return fmt.Sprintf("%d (x-death)", en.Deaths)
	}
	return fmt.Sprintf("%d", en.Replays+1)
}

func age(en deadletter.Entry, now time.Time) string {
	if en.DeadLetteredAt.IsZero() {
		return "-"
	}
	return en.Age(now).Round(time.Second).String()
}

// jsonEntry is an Entry with its body as text when it is UTF-8.
type jsonEntry struct {
	deadletter.Entry
	AgeSeconds int64  `json:"age_seconds"`
	Body       string `json:"body"`
	BodyBytes  []byte `json:"body_base64,omitempty"`
}

func jsonEntries(list []deadletter.Entry, now time.Time) []jsonEntry {
	out := make([]jsonEntry, 0, len(list))
	for _, en := range list {
		j := jsonEntry{Entry: en, AgeSeconds: int64(en.Age(now).Seconds())}
		if utf8.Valid(en.Body) {
			j.Body = string(en.Body)
		} else {
			j.BodyBytes = en.Body
		}
		out = append(out, j)
	}
	return out
}

func newDLQShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show ID|MESSAGE_ID [--json]",
		Short:   "Show one dead-lettered message (by the id of `dlq list`, or its message_id): headers and the whole body",
		Example: "  mailsvc dlq show dl-3f2a9c01b7e4",
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := e.loadBroker()
			if err != nil {
				return err
			}
			id := strings.TrimSpace(args[0])
			var found []deadletter.Entry
			err = browseDLQ(cfg, "mailsvc-dlq-show", func(en deadletter.Entry, _ func() error) error {
				if en.ID == id || en.MessageID == id {
					found = append(found, en)
				}
				return nil
			})
			switch {
			case err != nil:
				return err
			case len(found) == 0:
				return &ExitError{Code: ExitNotFound, Err: operator.NoDeadLetterError(id)}
			case asJSON:
				return writeJSON(e.stdout, jsonEntries(found, time.Now()))
			}
			for i, en := range found {
				if i > 0 {
					fmt.Fprintln(e.stdout)
				}
				writeDLQEntry(e.stdout, en, time.Now())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of the messages found")
	return cmd
}

func writeDLQEntry(w io.Writer, en deadletter.Entry, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range [][2]string{{"id", en.ID}, {"position", fmt.Sprint(en.Position)}, {"message_id", en.MessageID},
		{"type", en.Type}, {"routing_key", en.RoutingKey}, {"reason", en.Reason}, {"error", en.Error},
		{"dead_lettered_at", operator.Stamp(&en.DeadLetteredAt)}, {"age", age(en, now)}, {"failures", failures(en)}} {
		if f[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
		}
	}
	keys := make([]string, 0, len(en.Headers))
	for k := range en.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "header %s:\t%v\n", k, en.Headers[k])
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "--- body (%d bytes) ---\n%s\n", len(en.Body), strings.TrimRight(string(en.Body), "\n"))
}

// idsOf are the ids of entries.
func idsOf(entries []deadletter.Entry) []string {
	out := make([]string, 0, len(entries))
	for _, en := range entries {
		if !slices.Contains(out, en.ID) {
			out = append(out, en.ID)
		}
	}
	return out
}
