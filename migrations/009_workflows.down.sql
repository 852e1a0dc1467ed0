DROP TABLE sequences;
DROP TABLE workflow_edges;
DROP TABLE workflow_tasks;
DROP TABLE workflows;
