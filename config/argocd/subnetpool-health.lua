-- Argo CD health of a SubnetPool (ipam.subnet-operator.io, v1alpha2 and v1alpha1).
-- Healthy: it serves its range (an exhausted pool or one with overlapping
-- claims is still healthy; its message says so, and the Prometheus alerts
-- page for them). Progressing: not decided yet for its current generation,
-- waiting for its parent, or being deleted. Degraded: its spec cannot be
-- served as written (a cycle of parentRefs, a range its parent refuses).
local hs = {status = "Progressing", message = "Waiting for the controller to decide the pool"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation or 0
if (obj.status.observedGeneration or 0) < generation then
  return hs
end
local ready, exhausted, overlapping
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    ready = c
  elseif c.type == "Exhausted" then
    exhausted = c
  elseif c.type == "Overlapping" then
    overlapping = c
  end
end
if ready == nil or (ready.observedGeneration or generation) < generation then
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = "Serves " .. (obj.status.cidr or "") .. ", " .. (obj.status.utilization or "0.00%") .. " used"
  if exhausted ~= nil and exhausted.status == "True" then
    hs.message = hs.message .. "; exhausted: " .. (exhausted.message or "")
  end
  if overlapping ~= nil and overlapping.status == "True" then
    hs.message = hs.message .. "; " .. (overlapping.message or "")
  end
  if ready.reason ~= "Available" then
    hs.message = hs.message .. "; " .. ready.reason .. ": " .. (ready.message or "")
  end
  return hs
end
hs.message = ready.reason .. ": " .. (ready.message or "")
if ready.reason == "Pending" or ready.reason == "PoolNotFound" or ready.reason == "PoolNotReady" or ready.reason == "Terminating" then
  return hs
end
hs.status = "Degraded"
return hs
