package web_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
)

// TestBrowserAcknowledges: the finding page's form acknowledges with a
// bearer token through the API: refused with a wrong token (the page says
// so and the finding stays open), recorded with the right one, after
// which the page shows who and why.
func TestBrowserAcknowledges(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	bld := obstest.Builder(t, c)
	if _, err := bld.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := obstest.Scan(t, ctx, c, observer.Config{})
	tokens, users := accessFiles(t)
	access, err := web.LoadAccess(tokens, users)
	if err != nil {
		t.Fatal(err)
	}
	h, err := web.New(web.Config{Store: st, Findings: o.Findings, Health: o.Health, Access: access})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := fs[0].ID
	b := newBrowser(t, ctx)
	page := fmt.Sprintf("%s/finding/%d", srv.URL, id)
	b.open(t, page, `#ack`)
	if err := chromedp.Do(b.ctx,
		chromedp.SendKeys(`#ack textarea[name=reason]`, "known since the outage"),
		chromedp.SendKeys(`#ack input[name=token]`, strings.Repeat("z", 20)),
		chromedp.Click(`#ack button`),
		chromedp.WaitReady(`#ack-result`),
		chromedp.Poll[chromedp.Void](`document.getElementById('ack-result').textContent.startsWith('401')`),
	); err != nil {
		t.Fatalf("wrong token: %v", err)
	}
	if f, _ := st.Finding(ctx, id); f.State != observer.StateOpen {
		t.Fatalf("a wrong token left the finding %q", f.State)
	}
	if err := chromedp.Do(b.ctx,
		chromedp.SetValue(`#ack input[name=token]`, testToken),
		chromedp.Click(`#ack button`),
		chromedp.WaitReady(`h1 .state-acknowledged`),
	); err != nil {
		t.Fatalf("right token: %v", err)
	}
	f, _ := st.Finding(ctx, id)
	if f.State != observer.StateAcknowledged || f.Ack.By != "ci-bot" || f.Ack.Reason != "known since the outage" {
		t.Errorf("after the form: %q %+v", f.State, f.Ack)
	}
	if txt := eval[string](t, b, `document.getElementById('history').innerText`); !strings.Contains(txt, "acknowledged by ci-bot") {
		t.Errorf("history after acknowledging: %q", txt)
	}
}
