-- GET /boot-vars for a different seeded device on every request (mac + hostname, as iPXE sends).
local n = tonumber(os.getenv("BENCH_DEVICES") or "10000")
local i = 0
local function mac(k)
  return string.format("02:00:%02x:%02x:%02x:%02x", math.floor(k / 16777216) % 256, math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
end
request = function()
  i = i + 1
  local k = (i * 7919) % n
  return wrk.format("GET", string.format("/boot-vars?mac=%s&hostname=seat-%05d", mac(k), k))
end
