package config

import (
	"slices"
	"strings"
)

// Providers are the values of sender.provider and sender.fallback_provider,
// and of the provider a mail was sent through.
var Providers = []string{"smtp", "resend"}

// ReportsDeliveries reports whether provider tells mailsvc that a mail it
// accepted was delivered, so that a sent mail of it without a delivery,
// bounce or complaint report after mail.delivery_confirm_after is flagged
// "delivery unconfirmed" (docs/design.md, "Delivery unconfirmed"). This is
// the one place that decides it:
//   - "resend": when the deployment takes Resend's webhooks (email.delivered,
//     email.bounced), i.e. webhooks.resend_secret (or its file) is set. webhooks.addr needs
//     it, and a process that only sends still has it when every process is
//     given the same configuration.
//   - "smtp": when bounces.notify asks for SUCCESS and bounces.address is
//     set, so that the relay's success and failure notifications (RFC 3461)
//     come back to a VERP address that names the mail. A relay that does not
//     offer DSN sends none: leave SUCCESS out for it.
//
// Any other provider reports nothing.
func (c *Config) ReportsDeliveries(provider string) bool {
	switch provider {
	case "resend":
		return c.Webhooks.ResendSecret != "" || c.Webhooks.ResendSecretFile != ""
	case "smtp":
		return c.Bounces.Address != "" && slices.ContainsFunc(strings.Split(c.Bounces.Notify, ","), func(w string) bool {
			return strings.TrimSpace(w) == "SUCCESS"
		})
	}
	return false
}

// DeliveryReporters lists the Providers whose mails are checked for a
// delivery report (ReportsDeliveries), in Providers' order; none when
// mail.delivery_confirm_after is 0.
func (c *Config) DeliveryReporters() []string {
	var out []string
	for _, p := range Providers {
		if c.Mail.DeliveryConfirmAfter > 0 && c.ReportsDeliveries(p) {
			out = append(out, p)
		}
	}
	return out
}
