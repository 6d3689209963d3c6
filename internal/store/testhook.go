package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailsvc/mailsvc/internal/store/internal/testhook"
)

// init lends storetest what it needs from inside the store (see package
// testhook): references to production code, no test code.
func init() {
	testhook.Pool = func(st any) *pgxpool.Pool { return st.(*Store).pool }
	testhook.ClaimSQL = claimSQL
	testhook.InsertFeedback = func(ctx context.Context, st any, tx pgx.Tx, f any) error {
		return st.(*Store).insertFeedback(ctx, tx, f.(Feedback))
	}
}
