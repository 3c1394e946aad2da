-- Argo CD health of a Subnet (ipam.subnet-operator.io, v1alpha2 and v1alpha1).
-- Healthy: it holds its range. Progressing: not decided yet for its current
-- generation, or waiting for something that a sync usually brings (its pool
-- to be created or to become ready). Degraded: it waits for something only
-- a person can fix (an overlap, an exhausted pool, a claim the pool's rules
-- refuse).
local hs = {status = "Progressing", message = "Waiting for the controller to decide the claim"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation or 0
if (obj.status.observedGeneration or 0) < generation then
  return hs
end
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    if (c.observedGeneration or generation) < generation then
      return hs
    end
    if c.status == "True" then
      hs.status = "Healthy"
      hs.message = "Holds " .. (obj.status.cidr or "")
    elseif c.reason == "Pending" or c.reason == "PoolNotFound" or c.reason == "PoolNotReady" then
      hs.message = c.reason .. ": " .. (c.message or "")
    else
      hs.status = "Degraded"
      hs.message = c.reason .. ": " .. (c.message or "")
    end
    return hs
  end
end
return hs
