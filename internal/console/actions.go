package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/mailsvc/mailsvc/internal/operator"
)

// The actions, by the name in their URLs.
const (
	actResend     = "resend"
	actReconcile  = "reconcile"
	actResume     = "resume"
	actSuppress   = "suppress"
	actUnsuppress = "unsuppress"
	actReplay     = "replay"
)

// actionTitles names each action for a person.
var actionTitles = map[string]string{
	actResend:     "Resend a mail",
	actReconcile:  "Reconcile an unknown mail",
	actResume:     "Resume a provider",
	actSuppress:   "Add a suppression",
	actUnsuppress: "Remove a suppression",
	actReplay:     "Replay the dead-letter queue",
}

// actionInput is one action and its target, normalised.
type actionInput struct {
	Action    string
	Key       string // resend, reconcile
	Notice    bool   // resend: the copy starts with the resend notice
	Delivered bool   // reconcile
	Outcome   string // reconcile: "delivered" or "not-delivered"
	Provider  string // resume
	Address   string // suppress, unsuppress
	Reason    string
}

// parseAction reads the target of action from v (the fields key,
// outcome, provider, address); the reason is read apart.
func parseAction(action string, v url.Values) (actionInput, error) {
	in := actionInput{Action: action}
	if _, ok := actionTitles[action]; !ok {
		return in, &httpError{404, "not_found", fmt.Sprintf("no action %q (known: resend, reconcile, resume, suppress, unsuppress, replay)", action)}
	}
	var err error
	switch action {
	case actResend, actReconcile:
		var k string
		if k, err = field(v, "key"); err == nil {
			in.Key, err = pathKey(k)
		}
		if err == nil && action == actResend {
			in.Notice, err = flag(v, "notice")
		}
		if err == nil && action == actReconcile {
			in.Outcome, _ = field(v, "outcome")
			switch in.Outcome {
			case "delivered":
				in.Delivered = true
			case "not-delivered":
			default:
				err = bad(fmt.Sprintf("outcome: delivered or not-delivered, got %q", in.Outcome))
			}
		}
	case actResume:
		if in.Provider, err = field(v, "provider"); err == nil && in.Provider == "" {
			err = bad("provider: required (smtp or resend)")
		}
	case actSuppress, actUnsuppress:
		var a string
		if a, err = field(v, "address"); err == nil {
			if in.Address, err = operator.Address(a); err != nil {
				err = bad("address: " + err.Error())
			}
		}
	}
	return in, err
}

// flag reads a yes-or-no field: "", "0" or "false" is no, "1", "true"
// or "on" (a checkbox) is yes.
func flag(v url.Values, name string) (bool, error) {
	s, err := field(v, name)
	switch {
	case err != nil:
		return false, err
	case s == "" || s == "0" || s == "false":
		return false, nil
	case s == "1" || s == "true" || s == "on":
		return true, nil
	}
	return false, bad(fmt.Sprintf("%s: 1 or 0, got %q", name, s))
}

// what binds a confirmation nonce to this action on this target.
func (in actionInput) what() string {
	return strings.Join([]string{in.Action, in.Key, in.Outcome, in.Provider, in.Address, fmt.Sprint(in.Notice)}, "\x00")
}

// Target is the action's object as a person reads it.
func (in actionInput) Target() string {
	switch in.Action {
	case actResend:
		if in.Notice {
			return "the mail " + in.Key + ", the copy starting with the resend notice (\"if you already received this e-mail, please ignore it\")"
		}
		return "the mail " + in.Key
	case actReconcile:
		return "the mail " + in.Key + " as " + strings.ReplaceAll(in.Outcome, "-", " ")
	case actResume:
		return "the provider " + in.Provider
	case actSuppress, actUnsuppress:
		return "the address " + in.Address
	}
	return "the dead-letter queue"
}

// Title names the action.
func (in actionInput) Title() string { return actionTitles[in.Action] }

// Hidden are the target's form fields, to carry into the next step.
func (in actionInput) Hidden() map[string]string {
	out := map[string]string{}
	notice := ""
	if in.Notice {
		notice = "1"
	}
	for k, v := range map[string]string{"key": in.Key, "outcome": in.Outcome, "provider": in.Provider, "address": in.Address, "notice": notice} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// run takes the action for who (dryRun: decides only).
func (c *Console) run(ctx context.Context, who operator.Actor, in actionInput, dryRun bool) (operator.Result, error) {
	a := c.deps.Actions
	switch in.Action {
	case actResend:
		return a.ResendWith(ctx, who, in.Key, in.Reason, dryRun, operator.ResendOptions{Notice: in.Notice})
	case actReconcile:
		return a.Reconcile(ctx, who, in.Key, in.Delivered, in.Reason, dryRun)
	case actResume:
		return a.ResumeProvider(ctx, who, in.Provider, in.Reason, dryRun)
	case actSuppress:
		return a.Suppress(ctx, who, in.Address, in.Reason, dryRun)
	case actUnsuppress:
		return a.Unsuppress(ctx, who, in.Address, in.Reason, dryRun)
	}
	return a.ReplayDeadLetters(ctx, who, in.Reason, dryRun)
}
