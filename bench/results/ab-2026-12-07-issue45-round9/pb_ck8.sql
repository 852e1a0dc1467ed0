INSERT INTO ck8 (queue, kind, payload) VALUES ('default','noop','{}');
