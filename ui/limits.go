package ui

import "time"

// Limits on what one request may ask for.
const (
	// DefaultPageSize is how many jobs a list shows when the request names no limit.
	DefaultPageSize = 50
	// MaxPageSize is the most jobs one list page shows, whatever the request asks.
	MaxPageSize = 200
	// MaxActionIDs is the most jobs one requeue or delete action takes.
	MaxActionIDs = MaxPageSize
	// DefaultStatsMaxAge is how old the queue counts may be when Config.StatsMaxAge is 0.
	DefaultStatsMaxAge = 5 * time.Second
	// maxFilterLen bounds the queue and kind filters (a kind is at most 255 bytes).
	maxFilterLen = 255
	// maxShownPayload is how much of a job's args the job page shows.
	maxShownPayload = 256 << 10
	// maxQueuesShown bounds the rows of the queues table.
	maxQueuesShown = 500
	// maxQueueName is the longest queue name the tables hold (their checks), in characters.
	maxQueueName = 64
	// maxFormBytes bounds the body of a POST.
	maxFormBytes = 64 << 10
)
