package maintenance

// maxPurgeBatches bounds the batches of each purge in one sweep: the retention rules'
// together (retention.go), the dead and failed jobs (deadretention.go), the workflows
// (workflowretention.go) and the orphaned log records (logretention.go). A file of its
// own: each of them uses it, and it uses none of them.
const maxPurgeBatches = 1000
