package sender

import "github.com/mailsvc/mailsvc/internal/store"

// Attachment is a file sent with a mail: its name, media type and the
// bytes the fetch stage stored after verifying them (internal/attach),
// identical on every attempt, failover and resend.
type Attachment = store.AttachmentFile
