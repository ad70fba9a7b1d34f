// The test's driver of docs/go.md's snippets (compiled beside them, package main):
// "cas" runs CommitIfUnchanged and Violations once each, "consume" runs Consume on an
// endless source until the store fences it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	offsetstorev1 "example.com/consumer/gen/offsetstore/v1"
)

// endless hands out five records of each go-orders partition every 20 ms, from where it was sought.
type endless struct{ next map[int32]int64 }

func (s *endless) Seek(topic string, partition int32, next int64) {
	if next < 0 {
		next = 0
	}
	s.next[partition] = next
}

func (s *endless) Poll(ctx context.Context) ([]Record, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(20 * time.Millisecond):
	}
	var batch []Record
	for p := int32(0); p < 3; p++ {
		for i := 0; i < 5; i++ {
			batch = append(batch, Record{Topic: "go-orders", Partition: p, Offset: s.next[p]})
			s.next[p]++
		}
	}
	return batch, nil
}

func main() {
	target, group, mode := os.Args[1], os.Args[2], os.Args[3]
	client, conn, err := Connect(target)
	if err != nil {
		fmt.Println("connect:", err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	switch mode {
	case "cas":
		joined, err := client.JoinGroup(ctx, &offsetstorev1.JoinGroupRequest{GroupId: group, MemberId: "go-cas"})
		if err != nil {
			fmt.Println("join:", err)
			os.Exit(1)
		}
		for _, expected := range []int64{-1, 3} {
			stored, moved, err := CommitIfUnchanged(ctx, client, group, joined.GetGeneration(), expected, 7+expected+1)
			fmt.Println("cas", expected, stored, moved, err)
		}
		_, err = client.CommitOffsets(ctx, &offsetstorev1.CommitOffsetsRequest{
			GroupId: group,
			Offsets: []*offsetstorev1.OffsetCommit{{Topic: "go-orders", Partition: -1, Offset: 1}},
		})
		for _, v := range Violations(err) {
			fmt.Println("violation", v.GetField())
		}
	case "consume":
		err := Consume(ctx, client, group, "go-member", &endless{next: map[int32]int64{}})
		if errors.Is(err, ErrFenced) {
			fmt.Println("fenced")
			os.Exit(3)
		}
		fmt.Println("consume:", err)
		os.Exit(1)
	}
}
