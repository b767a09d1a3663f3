package protocol

import "time"

var benchEpoch = time.Now()

func nanotime() int64 { return int64(time.Since(benchEpoch)) }
