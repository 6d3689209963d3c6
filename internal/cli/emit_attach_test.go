package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
)

// emit --attach-url publishes an OrderConfirmed whose data.attachments
// names the file by reference, with the local copy's SHA-256 and size: an
// event the contract accepts.
func TestEmitWithAnAttachment(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)
	file := filepath.Join(t.TempDir(), "invoice-9.pdf")
	pdf := []byte("%PDF-1.4\ninvoice 9\n%%EOF\n")
	require.NoError(t, os.WriteFile(file, pdf, 0o600))

	_, err := o.run(t, "emit", "order-confirmed", "--order-id", "9", "--attach-url", "https://files.example.com/invoice-9.pdf",
		"--attach-file", file, "--attach-name", "Hóa đơn 9.pdf")
	require.NoError(t, err)
	got := drain(t, o.names.Queue)
	require.Len(t, got, 1)
	require.Empty(t, api.ValidateInput(got[0].Body))
	var ev struct {
		Data struct {
			Attachments []sampleAttachment `json:"attachments"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got[0].Body, &ev))
	sum := sha256.Sum256(pdf)
	require.Equal(t, []sampleAttachment{{FileName: "Hóa đơn 9.pdf", ContentType: "application/pdf",
		URL: "https://files.example.com/invoice-9.pdf", SHA256: hex.EncodeToString(sum[:]), Size: len(pdf)}}, ev.Data.Attachments)

	_, err = o.run(t, "emit", "order-confirmed", "--order-id", "10", "--attach-url", "https://files.example.com/x.pdf")
	require.ErrorContains(t, err, "--attach-url and --attach-file go together")
}
