package mailtype_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

func TestDetailOf(t *testing.T) {
	t.Parallel()
	smtp := mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}
	inner := mailtype.NewError(mailtype.Permanent, mailtype.ReasonRejected, errors.New("550 5.1.1 user unknown"))
	inner.Detail = smtp
	for _, c := range []struct {
		name string
		err  error
		want mailtype.ProviderDetail
	}{
		{"nil", nil, mailtype.ProviderDetail{}},
		{"no *Error", errors.New("boom"), mailtype.ProviderDetail{}},
		{"*Error without detail", mailtype.NewError(mailtype.Transient, mailtype.ReasonConnect, nil), mailtype.ProviderDetail{}},
		{"*Error with detail", inner, smtp},
		{"wrapped", fmt.Errorf("send: %w", inner), smtp},
		{"under an *Error without detail", mailtype.NewError(mailtype.Permanent, mailtype.ReasonAttemptsExceeded, inner), smtp},
		{"joined", errors.Join(errors.New("other"), inner), smtp},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, mailtype.DetailOf(c.err))
			require.Equal(t, c.want == mailtype.ProviderDetail{}, mailtype.DetailOf(c.err).IsZero())
		})
	}
}

func TestProviderDetailJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    mailtype.ProviderDetail
		want string
	}{
		{mailtype.ProviderDetail{}, `{}`},
		{mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}, `{"smtp_code":550,"smtp_enhanced_code":"5.1.1"}`},
		{mailtype.ProviderDetail{SMTPCode: 550}, `{"smtp_code":550}`},
		{mailtype.ProviderDetail{HTTPStatus: 422, ErrorName: "validation_error"}, `{"http_status":422,"error_name":"validation_error"}`},
	} {
		b, err := json.Marshal(c.d)
		require.NoError(t, err)
		require.Equal(t, c.want, string(b))
	}
}
