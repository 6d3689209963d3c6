// Package attach is the fetch stage of attachments by reference
// (claim-check; docs/design.md, "Attachments"): it takes the mails whose
// files wait to be fetched, fetches each file safely (https only, hosts on
// an allow-list, no connection to a private address, size, time and
// progress bounds), verifies its size, content type and SHA-256, and
// stores the bytes, off the consumer's path and with its own concurrency.
// A mail is sent only once its files are stored (the claim's gate).
package attach

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Policy says where a fetch may go.
type Policy struct {
	// AllowedHosts are exact lower-case host names (or IP literals) and
	// "*.suffix" patterns (attachments.allowed_hosts).
	AllowedHosts []string
	// AllowPrivate lets a fetch connect to loopback, private, link-local,
	// unspecified and other non-public addresses
	// (attachments.allow_private).
	AllowPrivate bool
}

// hostAllowed reports whether host (lower-cased, no port) is on the list.
func (p Policy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowedHosts {
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// checkURL refuses a URL that is not https or names a host off the list.
func (p Policy) checkURL(u *url.URL) *Refusal {
	if u.Scheme != "https" {
		return refuse(ReasonScheme, false, "scheme %q is not https", u.Scheme)
	}
	if u.User != nil {
		return refuse(ReasonScheme, false, "URL carries user info")
	}
	if !p.hostAllowed(u.Hostname()) {
		return refuse(ReasonHost, false, "host %q is not on attachments.allowed_hosts", u.Hostname())
	}
	return nil
}

// errPrivateAddress is the dial-time refusal of a non-public address.
var errPrivateAddress = errors.New("refused address")

// control is the net.Dialer Control function: it runs after the name was
// resolved, on the very address the socket will connect to, so a DNS
// answer that changes between a check and the connection (DNS rebinding)
// cannot reach a private address.
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	if p.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address and port", errPrivateAddress, address)
	}
	if !publicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s is not a public address (loopback, private, link-local or unspecified)", errPrivateAddress, ap.Addr())
	}
	return nil
}

// nonPublic are ranges no fetch may reach besides the ones netip names:
// carrier-grade NAT, the IETF protocol assignments, benchmarking, the
// documentation nets, 6to4 relay, NAT64 and the discard prefix.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("192.88.99.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// publicAddr reports whether a is a global unicast address outside every
// private, shared and reserved range (an IPv4-mapped IPv6 address is
// judged as its IPv4 address).
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
