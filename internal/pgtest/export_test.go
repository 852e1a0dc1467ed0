package pgtest

// StartThrowaway exposes step 3 of URL to the external tests, which cannot switch URL's
// once-per-process choice.
var StartThrowaway = startThrowaway

// AnySocket exposes the Docker socket check of step 4.
var AnySocket = anySocket
