INSERT INTO ck0 (queue, kind, payload) VALUES ('default','noop','{}');
