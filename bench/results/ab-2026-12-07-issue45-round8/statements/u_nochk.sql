UPDATE u_nochk SET status = CASE WHEN status = 'queued' THEN 'running' ELSE 'queued' END, locked_at = now() WHERE id = 1;
