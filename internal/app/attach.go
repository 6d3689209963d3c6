package app

import (
	"crypto/tls"
	"fmt"

	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

// buildAttach builds the attachment fetch stage (docs/design.md,
// "Attachments") with the sender role: its metrics always (the alert
// finds its series), the stage itself when attachments.allowed_hosts is
// set. A CA file that cannot be read stops the start, naming the key.
func (w *wiring) buildAttach() ([]named, error) {
	m := attach.NewMetrics(w.reg)
	a := w.cfg.Attachments
	if !a.Enabled() {
		return nil, nil
	}
	tlsCfg := &tls.Config{MinVersion: tlsconfig.MinVersion}
	if a.TLSCAFile != "" {
		pool, _, err := tlsconfig.ReadCAs("attachments.tls_ca_file", a.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("build the attachment fetch stage: %w", err)
		}
		tlsCfg.RootCAs = pool
	}
	st := attach.NewStage(a.Config(tlsCfg, w.cfg.Mail.MaxEventAge), w.store, m, w.log)
	return []named{{name: "attach", c: st}}, nil
}
