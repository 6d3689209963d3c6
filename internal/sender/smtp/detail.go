package smtp

import (
	"errors"
	"net/textproto"
	"strings"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// sendDetail is the provider detail of a failed transaction: the code of
// the reply that decided it and the enhanced status code that prefaces
// that reply's text (enhancedCode), read whether or not the server
// advertised ENHANCEDSTATUSCODES.
func sendDetail(te *txError) mailtype.ProviderDetail {
	if te.code == 0 {
		return mailtype.ProviderDetail{}
	}
	return mailtype.ProviderDetail{SMTPCode: te.code, SMTPEnhancedCode: enhancedCode(te.code, te.text)}
}

// replyDetail is the provider detail of an SMTP reply in err's chain (a
// refused greeting, EHLO, STARTTLS or AUTH), or the zero value when the
// failure was no reply.
func replyDetail(err error) mailtype.ProviderDetail {
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code < 400 || te.Code > 599 {
		return mailtype.ProviderDetail{}
	}
	return mailtype.ProviderDetail{SMTPCode: te.Code, SMTPEnhancedCode: enhancedCode(te.Code, te.Msg)}
}

// enhancedCode returns the enhanced status code that prefaces text, the
// text of an SMTP reply with reply code code (what follows "550 " in
// "550 5.1.1 <x> User unknown"), or "" when there is none. RFC 2034,
// section 4: the code comes first in the text and is followed by one or
// more spaces (or ends the text); its syntax is RFC 3463's
// class "." subject "." detail, class "2" / "4" / "5", subject and detail
// 1*3digit; and its class must agree with the first digit of the reply
// code. Spaces before the code are tolerated (RFC 5321 allows one). A code
// is read whether or not the server advertised ENHANCEDSTATUSCODES:
// servers that do not advertise it often send codes anyway, and a token of
// this exact shape in that place means nothing else.
func enhancedCode(code int, text string) string {
	text = strings.TrimLeft(text, " \t")
	end := strings.IndexAny(text, " \t\r\n")
	if end < 0 {
		end = len(text)
	}
	token := text[:end]
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(parts[0]) != 1 || parts[0][0] != byte('0'+code/100) {
		return ""
	}
	switch parts[0] {
	case "2", "4", "5":
	default:
		return ""
	}
	for _, p := range parts[1:] {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return ""
		}
	}
	return token
}
