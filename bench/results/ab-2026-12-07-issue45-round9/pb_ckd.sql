INSERT INTO ckd (queue, kind, payload) VALUES ('default','noop','{}');
