INSERT INTO bare_jobs (payload) VALUES ('{"n":1}');
