package mailtype

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConnSecretsFindsEveryForm(t *testing.T) {
	t.Parallel()
	for conn, want := range map[string][]string{
		"postgres://u:pw1@h/db":                    {"pw1"},
		"amqp:/guest:pw2@h:5672/":                  {"pw2"},
		"amqps:guest:pw3@h/":                       {"pw3"},
		"postgres://u:p%40w@h/db":                  {"p%40w", "p@w"},
		"postgres://u:a@b@h/db":                    {"a@b"},
		"postgres://h/db?sslmode=x&password=q%20w": {"q%20w", "q w"},
		"host=h password = s1 dbname=x":            {"s1"},
		"host=h password='s 2' dbname=x":           {"s 2"},
		`host=h password='s\'3' dbname=x`:          {`s\'3`, `s'3`},
		"host=h password='open dbname=x":           {"open dbname=x"},
		`host=h password=a\ b dbname=x`:            {`a\ b`, "a b"},
		"host=h sslpassword=k1":                    {"k1"},
		"host=h dbname=x":                          nil,
		"postgres://u@h/db":                        nil,
	} {
		got := ConnSecrets(conn)
		for _, w := range want {
			require.Contains(t, got, w, conn)
		}
		if want == nil {
			require.Empty(t, got, conn)
		}
	}
}

func TestRedactorMasksEveryFormAndKeepsTheChain(t *testing.T) {
	t.Parallel()
	r := NewRedactor("se\"cret x", "", "se")
	require.Equal(t, "a xxxxx b xxxxx c xxxxx d xxxxx", r.Redact(`a se"cret x b se\"cret x c se%22cret+x d se%22cret%20x`))
	base := errors.New("dial se\"cret x")
	err := r.Error(base)
	require.Equal(t, "dial xxxxx", err.Error())
	require.ErrorIs(t, err, base)
	var buf bytes.Buffer
	n, werr := r.Writer(&buf).Write([]byte("pw=se\"cret x\n"))
	require.NoError(t, werr)
	require.Equal(t, 13, n)
	require.Equal(t, "pw=xxxxx\n", buf.String())
	var none *Redactor
	require.Equal(t, "se", none.Redact("se"))
	require.NoError(t, none.Error(nil))
}
