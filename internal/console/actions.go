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

// what binds a confirmation nonce to this action on this target.
func (in actionInput) what() string {
	return strings.Join([]string{in.Action, in.Key, in.Outcome, in.Provider, in.Address}, "\x00")
}

// Target is the action's object as a person reads it.
func (in actionInput) Target() string {
	switch in.Action {
	case actResend:
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
	for k, v := range map[string]string{"key": in.Key, "outcome": in.Outcome, "provider": in.Provider, "address": in.Address} {
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
		return a.Resend(ctx, who, in.Key, in.Reason, dryRun)
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
