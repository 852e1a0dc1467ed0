INSERT INTO ckc (queue, kind, payload) VALUES ('default','noop','{}');
