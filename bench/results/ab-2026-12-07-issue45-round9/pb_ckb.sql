INSERT INTO ckb (queue, kind, payload) VALUES ('default','noop','{}');
