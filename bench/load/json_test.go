package load

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestJSONRoundTrip(t *testing.T) {
	rep := sampleReport()
	rep.Started = time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	rep.Targets[0].Rounds[0].ITL = Percentiles{Count: 9, P50: 0.25, Max: 1.5}
	var first bytes.Buffer
	if err := rep.WriteJSON(&first); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(first.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var second bytes.Buffer
	if err := back.WriteJSON(&second); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() {
		t.Errorf("JSON changed across a round trip:\n%s\n---\n%s", first.String(), second.String())
	}
	if back.Config.OutputLen != (Dist{64, 512}) || back.Machine.CPUModel != "Test CPU" ||
		back.Targets[1].Median.Errors["status_503"] != 2 || back.Targets[0].Rounds[0].ITL.P50 != 0.25 {
		t.Errorf("fields lost: %+v", back)
	}
	if !bytes.Contains(first.Bytes(), []byte(`"output_len": "64-512"`)) || !bytes.Contains(first.Bytes(), []byte(`"nproc": 2`)) {
		t.Errorf("unexpected JSON shape:\n%s", first.String())
	}
}
