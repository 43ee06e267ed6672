# evocamp: evaluation campaigns for quality diversity, ES and BO.
# Thin entry point; the rules live in workflow/rules/.


# The default campaign, unless a campaign file is given with --configfile: that file
# is then the whole campaign (keys it leaves out take the schema defaults), with
# --config key=value on top. Snakemake would otherwise merge it into this one.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/campaign.smk"
include: "workflow/rules/figures.smk"


rule all:
    default_target: True
    input:
        campaign_targets,
