// Package browsertest drives the skiplock dashboard (package ui) in a real headless
// Chromium against a real Postgres. It is a module of its own so that the main module
// does not depend on chromedp.
//
// TestBrowser_QueuesLiveCountsAndRequeueADeadJob checks the live queues page and a
// requeue; TestBrowser_LargeTable follows count links to jobs under 42,500 newer ones,
// runs a bulk requeue by filter through its confirmation, and measures that a
// 255-character kind leaves the Status column on screen.
//
// The tests need Debian's chromium at /usr/bin/chromium (or $SKIPLOCK_CHROMIUM);
// scripts/ensure-env.sh installs it where apt-get may be used. Without it the test fails
// and says how to install it; it never skips. Run it with
//
//	cd ui/browsertest && go test -race -count=1 ./...
//
// and refresh the dashboard page's screenshot (docs/ui-queues.png) with
//
//	cd ui/browsertest && go test -count=1 -run TestBrowser ./... -update-screenshot
package browsertest
