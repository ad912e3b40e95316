-- Fleet-wide credential push: every worker's NVMe-oF secret rotated in place
-- (PUT /workers/{id}/credential {"generate": true}), worker after worker, as an operator's script
-- rotating the whole fleet would. Worker ids as bench/lib.ts's workerOf makes them.
local n = tonumber(os.getenv("BENCH_DEVICES") or "1000")
local headers = { ["authorization"] = "Bearer " .. (os.getenv("BENCH_TOKEN") or ""), ["content-type"] = "application/json" }
local body = '{"generate":true}'
local i = -1
request = function()
  i = i + 1
  return wrk.format("PUT", string.format("/workers/seat-%05d/credential", i % n), headers, body)
end
