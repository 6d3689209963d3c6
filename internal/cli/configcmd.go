package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/internal/tlsconfig"
)

func newConfigCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the configuration"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Validate the config (TLS files included) and print it with secrets masked, and the certificates' expiry (exit 0 valid, 2 invalid)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := e.load()
			if err != nil {
				return err
			}
			out, err := yaml.Marshal(cfg)
			if err != nil {
				return fmt.Errorf("print config: %w", err)
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintln(e.stderr, "warning:", w)
			}
			_, err = fmt.Fprintf(e.stdout, "# config is valid\n%s%s", out, certificateReport(cfg.Certificates(), time.Now()))
			return err
		},
	})
	return cmd
}

// certificateReport lists, as YAML comments, every certificate the config
// reads (smtp.tls_*, amqp.tls_*, database.url's sslrootcert and sslcert):
// key, file, subject and expiry, with the days left at now. "" when none.
func certificateReport(certs []tlsconfig.Cert, now time.Time) string {
	if len(certs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# certificates (read at start):\n")
	for _, c := range certs {
		left := c.NotAfter.Sub(now)
		state := fmt.Sprintf("%d days left", int(left.Hours()/24))
		switch {
		case left <= 0:
			state = "EXPIRED"
		case left < 30*24*time.Hour:
			state += ", renew soon"
		}
		fmt.Fprintf(&b, "#   %s %s: %s (issuer %s), expires %s (%s)\n", c.Key, c.File, c.Subject, c.Issuer,
			c.NotAfter.UTC().Format(time.RFC3339), state)
	}
	return b.String()
}
