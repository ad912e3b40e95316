-- Boot storm: every device does /devices/report (11 fields) then /boot-vars, device after device.
local n = tonumber(os.getenv("BENCH_DEVICES") or "10000")
-- Several load generators share a fleet: this one takes seats offset, offset + stride, ...
local stride = tonumber(os.getenv("BENCH_STRIDE") or "1")
local offset = tonumber(os.getenv("BENCH_OFFSET") or "0")
local threads = {}
local counter = 0
function setup(thread)
  thread:set("first", counter)
  counter = counter + 1
end
local i = -1
local function mac(k)
  return string.format("02:00:%02x:%02x:%02x:%02x", math.floor(k / 16777216) % 256, math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
end
request = function()
  i = i + 1
  local k = (math.floor(i / 2) * stride + offset) % n
  if i % 2 == 0 then
    return wrk.format("GET", string.format(
      "/devices/report?mac=%s&uuid=4c4c4544-0000-1000-8000-%012d&manufacturer=ACME&product=Seat&serial=SN%d&cpumodel=Ryzen%%207&mem-total=0x8000&mem-type=DDR5&mem-speed=5600&chip=RTL8125&busid=0110ec8125",
      mac(k), k, k))
  end
  return wrk.format("GET", string.format("/boot-vars?mac=%s&hostname=seat-%05d", mac(k), k))
end
