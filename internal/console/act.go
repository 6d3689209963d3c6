package console

import (
	"net/http"

	"github.com/mailsvc/mailsvc/internal/operator"
)

// previewReason is the reason of a confirmation's dry run, which writes
// no audit row.
const previewReason = "confirmation step (dry run)"

// confirmData is the confirmation page's.
type confirmData struct {
	Input   actionInput
	Plan    string
	Refusal string
	Nonce   string
}

// confirm runs the action dry and shows what it will do, or its refusal,
// with a one-time nonce for the POST that runs it. GET takes the target
// from the query string (keys and providers), POST from the form
// (addresses, kept out of URLs).
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, id *identity) error {
	v, err := queryOf(r)
	if err != nil {
		return err
	}
	if r.Method == http.MethodPost {
		v = r.PostForm
	} else if v.Has("address") {
		return bad("address: send it with the form (POST), not in the URL: an address in a URL lands in logs")
	}
	in, err := parseAction(r.PathValue("action"), v)
	if err != nil {
		return err
	}
	in.Reason = previewReason
	d := confirmData{Input: in}
	res, err := c.run(r.Context(), operator.Actor{Name: id.Name, Via: "console"}, in, true)
	code := http.StatusOK
	if err != nil {
		he := classify(err)
		if he.Status != http.StatusConflict && he.Status != http.StatusNotFound {
			return err
		}
		d.Refusal, code = he.Msg, he.Status
	} else {
		d.Plan, d.Nonce = res.Summary, c.sessions.nonce(id.key(), in.what())
	}
	c.render(w, code, "confirm", c.view(id, in.Title(), "", d))
	return nil
}

// act runs a confirmed action: its nonce must be one this person's
// confirmation page issued for this action and target, unused (a replay
// is refused, 409, and changes nothing).
func (c *Console) act(w http.ResponseWriter, r *http.Request, id *identity) error {
	in, err := parseAction(r.PathValue("action"), r.PostForm)
	if err != nil {
		return err
	}
	if in.Reason, err = reasonOf(r.PostForm.Get("reason")); err != nil {
		return err
	}
	if !c.sessions.consume(id.key(), r.PostForm.Get("nonce"), in.what()) {
		return errUsed
	}
	d := struct {
		Input  actionInput
		Result *operator.Result
		Error  string
	}{Input: in}
	res, err := c.run(r.Context(), operator.Actor{Name: id.Name, Via: "console"}, in, false)
	code := http.StatusOK
	if err != nil {
		he := classify(err)
		if he.Status == http.StatusInternalServerError {
			return err
		}
		d.Error, code = he.Msg, he.Status
	} else {
		d.Result = &res
	}
	c.deps.Log.Info("console action", "user", id.Name, "action", in.Action, "error", err)
	c.render(w, code, "result", c.view(id, in.Title(), "", d))
	return nil
}
