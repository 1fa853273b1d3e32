"""The policies samplers act with: the policy copy kept at the newest parameters (a host's relay fetches each
version once), how it explores, which policy acts for each env column and each agent, and each policy's spaces.
"""
