package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// browserFlags are what headless Chromium needs here: no sandbox (root in
// a container), no GPU, and nothing that reaches the network by itself.
var browserFlags = []chromedp.ExecAllocatorOption{
	chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
	chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	chromedp.Flag("hide-scrollbars", true), chromedp.WindowSize(1280, 800),
}

// browser is the one Chromium of the package's run, started by the
// first browser test and closed by TestMain.
var browser struct {
	once   sync.Once
	ctx    context.Context
	err    error
	cancel func()
}

// chromiumPath finds the browser: MAILSVC_CHROMIUM, else chromium on the PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("MAILSVC_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func startBrowser(dir string) (context.Context, func(), error) {
	path, err := chromiumPath()
	if err != nil {
		return nil, nil, err
	}
	opts := append([]chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.UserDataDir(dir)}, browserFlags...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no timeout
		cancelCtx()
		cancelAlloc()
		return nil, nil, err
	}
	return ctx, func() { cancelCtx(); cancelAlloc(); _ = os.RemoveAll(dir) }, nil
}

// closeBrowser ends the browser, if a test started one.
func closeBrowser() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// tab opens a new tab (its own cookies: an incognito-like browser
// context) in the shared browser; the test fails, saying how to install
// Chromium, when there is none.
func tab(t *testing.T) context.Context {
	t.Helper()
	testenv.NeedsServer(t, "headless Chromium")
	browser.once.Do(func() {
		dir, err := os.MkdirTemp("", "mailsvc-chromium-")
		if err != nil {
			browser.err = err
			return
		}
		browser.ctx, browser.cancel, browser.err = startBrowser(dir)
	})
	require.NoError(t, browser.err, "headless Chromium is needed for the console's browser tests: "+
		"run scripts/chromium.sh (make test does; Debian: apt-get install chromium), or set MAILSVC_CHROMIUM to its path")
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(ctx, 20*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	return ctx
}

// browserLogin logs name in through the login form.
func browserLogin(t *testing.T, ctx context.Context, b *bundle, name, password string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(b.base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), name),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), password),
		chromedp.Submit(chromedp.CSS(`input[name=password]`)),
	))
	require.Contains(t, text(t, ctx, `.who span`), name)
}

// text returns the visible text of the first element matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))))
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err)
	return strings.TrimSpace(s)
}

// screenshot saves the page as docs/console-NAME.png at the laptop and
// phone sizes when MAILSVC_CONSOLE_SCREENSHOTS names the docs directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MAILSVC_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	for _, size := range []struct {
		suffix string
		w, h   int64
		mobile bool
	}{{"", 1280, 800, false}, {"-phone", 390, 844, true}} {
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(size.w, size.h, chromedp.EmulateScale(1))))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "console-"+name+size.suffix+".png"), png, 0o644))
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)))
}

// fullScreenshot saves the page at the laptop width in a window as tall
// as height (the sandboxed preview frame is painted only inside the
// window) as docs/console-NAME-full.png, with MAILSVC_CONSOLE_SCREENSHOTS
// set.
func fullScreenshot(t *testing.T, ctx context.Context, name string, height int64) {
	t.Helper()
	dir := os.Getenv("MAILSVC_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, height, chromedp.EmulateScale(1))))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "console-"+name+"-full.png"), png, 0o644))
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)))
}

func TestBrowserAViewerLogsInReadsAndIsRefusedAnAction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insertSent(t, storeMail("42"))
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/search"), chromedp.WaitVisible(chromedp.CSS(`section.login`))))
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "Log in · mailsvc console", title)
	screenshot(t, ctx, "login")
	browserLogin(t, ctx, b, viewerName, viewerPassword)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/orders/42")))
	require.Equal(t, "order-confirmed:42", text(t, ctx, `table.mails tbody td:nth-child(2) a`))
	require.Equal(t, "sent", text(t, ctx, `table.mails tbody .status`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.base+"/actions/resend?key=order-confirmed:42")))
	require.Equal(t, "your role is viewer: only an operator may act (ask an operator, or for the operator role)", text(t, ctx, `p.error`))
	require.Equal(t, int64(1), b.mails(t), "nothing was sent again")
}
