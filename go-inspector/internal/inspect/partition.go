package inspect

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// PartitionKey renders (spec id, partition tuple) canonically: fields sorted
// by partition field id, each value tagged with its Go type so that e.g. the
// string "1" and the int 1, or null and "", never collide.
func PartitionKey(specID int32, partition map[int]any) string {
	ids := make([]int, 0, len(partition))
	for id := range partition {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	var b strings.Builder
	b.WriteString(strconv.Itoa(int(specID)))
	for _, id := range ids {
		b.WriteByte('|')
		b.WriteString(strconv.Itoa(id))
		b.WriteByte('=')
		b.WriteString(renderValue(partition[id]))
	}
	return b.String()
}

// renderValue gives a type-tagged, unambiguous text for one partition value.
func renderValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "s:" + strconv.Quote(x)
	case []byte:
		return fmt.Sprintf("b:%x", x)
	case uuid.UUID:
		return "u:" + x.String()
	case time.Time:
		return "t:" + x.UTC().Format(time.RFC3339Nano)
	case fmt.Stringer:
		return fmt.Sprintf("%T:%s", v, x.String())
	default:
		return fmt.Sprintf("%T:%v", v, v)
	}
}
