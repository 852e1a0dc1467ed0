// Package browsertest drives the skiplock dashboard (package ui) in a real headless
// Chromium against a real Postgres. It is a module of its own so that the main module
// does not depend on chromedp.
//
// The test needs Debian's chromium at /usr/bin/chromium (or $SKIPLOCK_CHROMIUM);
// scripts/ensure-env.sh installs it where apt-get may be used. Without it the test fails
// and says how to install it; it never skips. Run it with
//
//	cd ui/browsertest && go test -race -count=1 ./...
//
// and refresh the README's screenshot (docs/ui-queues.png) with
//
//	cd ui/browsertest && go test -count=1 -run TestBrowser ./... -update-screenshot
package browsertest
